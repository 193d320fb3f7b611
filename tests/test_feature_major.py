"""Observations stored feature by feature (``feature_major_observations=True``): the same values
as each agent's row, handed out as strided views, through steps, resets and GraphedCollector."""
import pytest
import torch

from test_split_step import rollout
from torchrl_warp.envs import CartPoleEnv, MPEEnv, TagEnv, TagGridWorldEnv
from torchrl_warp.graphed_collector import GraphedCollector

CASES = {
    "tag": lambda **kw: TagEnv(num_envs=3, num_taggers=2, num_runners=5, num_other_agents_observed=2,
                               episode_length=4, **kw),
    "simple_tag": lambda **kw: MPEEnv("simple_tag", num_envs=3, max_steps=4, **kw),  # groups of two sizes
    "gridworld": lambda **kw: TagGridWorldEnv(num_envs=3, num_taggers=3, use_full_observation=False,
                                             episode_length=4, **kw),
    "cartpole": lambda **kw: CartPoleEnv(num_envs=3, max_steps=4, **kw),
}


@pytest.mark.sim
@pytest.mark.parametrize("name", list(CASES))
def test_feature_major_observations_are_the_same_values(name):
    rows, features = CASES[name](seed=2), CASES[name](seed=2, feature_major_observations=True)
    (a, state_a), (b, state_b) = rollout(rows), rollout(features)
    assert a["next", "done"].any()  # resets inside the rollout
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key
    for key in state_a.keys(True, True):  # the observation field too, whatever its strides
        assert torch.equal(state_a[key], state_b[key]), key
    for key, handed in features.reset().items(True, True):
        if key[-1] == "observation" and handed.dim() == 3 and handed.shape[1] > 1:  # [E, n, D]
            assert handed.stride(1) == 1 and not handed.is_contiguous(), key  # a feature of the agents side by side


def test_graphed_batches_are_the_same_values():
    batches = []
    for fm in (False, True):
        env = CASES["tag"](seed=4, feature_major_observations=fm)
        collector = GraphedCollector(env, None, frames_per_batch=env.num_envs * 5, total_frames=3 * env.num_envs * 5)
        torch.manual_seed(0)
        batches.append(torch.cat(list(collector), 1))
    for key in batches[0].keys(True, True):
        assert torch.equal(batches[0][key], batches[1][key]), key


def test_the_flag_is_checked():
    with pytest.raises(TypeError, match="feature_major_observations"):
        CASES["cartpole"](feature_major_observations=1)
