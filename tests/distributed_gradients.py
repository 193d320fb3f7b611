"""One rank of tests/test_distributed.py's gradient check (run under torchrun): the gradients
of every rank's minibatch computed alone, then this rank's after the all-reduce, saved to
``<out>/rank<r>.pt``."""
import sys
import torch
from omegaconf import OmegaConf
from torchrl_warp.envs import CartPoleEnv
from torchrl_warp.recipes.distributed import Ranks
from torchrl_warp.recipes.on_policy import GroupAgent, without_next_observations

ALGO = OmegaConf.create(dict(name="ppo", hidden=[16], reward_scale=1.0, clip_epsilon=0.2, entropy_coeff=0.01,
                             critic_coeff=1.0, gamma=0.99, lmbda=0.95))
ranks = Ranks.from_environment()
device = ranks.start(torch.device("cpu"))
out = sys.argv[1]

def minibatch(rank):
    env = CartPoleEnv(num_envs=4, seed=rank)
    torch.manual_seed(rank)
    with torch.no_grad():
        batch = env.rollout(8, agent.actor, break_when_any_done=False)
        agent.advantage(batch)
    return without_next_observations(batch, [None]).reshape(-1)

torch.manual_seed(0)
agent = GroupAgent(CartPoleEnv(num_envs=4), None, ALGO, device)
grads = {}
for r in range(ranks.world):  # every rank's minibatch, each gradient alone (what one process computes)
    agent.zero_grad(set_to_none=True)
    agent.loss_value(minibatch(r))[0].backward()
    grads[r] = [p.grad.clone() for p in agent.parameters()]
agent.zero_grad(set_to_none=True)
agent.loss_value(minibatch(ranks.rank))[0].backward()
ranks.average_gradients_(agent.parameters())
agree = ranks.parameters_agree(agent)
with torch.no_grad():
    if ranks.rank == 1:
        next(agent.parameters()).add_(1e-3)
disagree = not ranks.parameters_agree(agent)
torch.save({"alone": grads, "averaged": [p.grad for p in agent.parameters()], "agree": agree, "disagree": disagree},
           f"{out}/rank{ranks.rank}.pt")
ranks.stop()
