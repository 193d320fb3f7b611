"""VMAS's MPE ``simple_adversary`` (VMAS 1.5.2): good agents cover the goal landmark, which
only they know, and keep an adversary away from it.

Examples:
    >>> env = SimpleAdversaryEnv(num_envs=2)
    >>> env.group_map
    {'adversary': ['adversary_0'], 'agent': ['agent_0', 'agent_1']}
    >>> env.observation_spec["adversary", "observation"].shape, env.observation_spec["agent", "observation"].shape
    (torch.Size([2, 1, 8]), torch.Size([2, 2, 10]))
    >>> td = env.rollout(3)
    >>> td["next", "agent", "reward"].shape, env.state["goal"].shape
    (torch.Size([2, 3, 2, 1]), torch.Size([2]))
"""
from torchrl_warp.cuda.simple_adversary import adversary_observe, adversary_place, adversary_reward
from torchrl_warp.envs.mpe import COLORS, SCENARIOS, Agent, Landmark, ScenarioKernels, common_parameters
from torchrl_warp.envs.mpe_goal import GoalScenario, goal_field
from torchrl_warp.params import Param

__all__ = ["SimpleAdversaryEnv"]


class SimpleAdversaryEnv(GoalScenario):
    """VMAS ``simple_adversary``: ``n_adversaries`` adversaries (``adversary_<i>``) then
    ``n_agents - n_adversaries`` good agents (``agent_<i>``), all radius 0.15, and
    ``n_agents - 1`` landmarks (radius 0.08), one of them the goal; nothing collides, the
    world is unbounded.

    Groups ``"adversary"`` and ``"agent"``. A good agent observes the goal's position minus
    its own, then every landmark's, then every other agent's (VMAS's agent order):
    ``2 + 4 (n_agents - 1)`` floats. An adversary observes the same without the goal
    (``4 (n_agents - 1)``): it must guess the goal from where the good agents go. Action: a 2-d
    force in ``[-1, 1]``, or one of 9. Rewards: an adversary gets minus its distance to the
    goal; every good agent gets the same, the sum of the adversaries' distances to the goal
    minus the nearest good agent's distance to it. Never terminates; the episode ends after
    ``max_steps``.

    Reset: agents and landmarks uniform in ``[-1, 1)^2``, at rest; the goal uniform over the
    landmarks, per env (``state["goal"]``, see :mod:`torchrl_warp.envs.mpe_goal`: VMAS draws
    one for the whole batch). Rendering: the goal green, the other landmarks black.
    """

    scenario = "simple_adversary"
    parameters = {
        "n_agents": Param(3, "agents in all, adversaries included (landmarks: n_agents - 1)", ge=2),
        "n_adversaries": Param(1, "adversaries (the first agents)", ge=1),
        **common_parameters(),
    }

    def _check_params(self, p):
        super()._check_params(p)
        if p.n_adversaries >= p.n_agents:
            raise ValueError(f"{type(self).__name__}: n_adversaries ({p.n_adversaries}) must be below n_agents "
                             f"({p.n_agents}): there must be a good agent (VMAS asserts it)")

    def _agents(self, p):
        n = p.n_agents
        return [Agent(f"adversary_{i}", radius=0.15, collide=False, observation_size=4 * (n - 1),
                      color=COLORS["red"]) for i in range(p.n_adversaries)] + \
               [Agent(f"agent_{i}", radius=0.15, collide=False, observation_size=2 + 4 * (n - 1),
                      color=COLORS["blue"]) for i in range(n - p.n_adversaries)]

    def _landmarks(self, p):
        return [Landmark(f"landmark {i}", radius=0.08, collide=False, color=COLORS["black"])
                for i in range(p.n_agents - 1)]

    def _goal_colors(self, goal):
        landmarks = [COLORS["green"] if i == goal else COLORS["black"] for i in range(len(self.landmarks))]
        return [a.color for a in self.agents], landmarks

    def _kernels(self, p):
        return ScenarioKernels(
            reset=(adversary_place,), observe=(adversary_observe,),
            step=((adversary_observe, adversary_reward),),
            fields=[goal_field()],
        )


SCENARIOS["simple_adversary"] = SimpleAdversaryEnv
