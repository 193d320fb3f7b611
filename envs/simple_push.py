"""VMAS's MPE ``simple_push`` (VMAS 1.5.2): a good agent goes to the goal landmark; an
adversary, who does not know which landmark it is, pushes it away.

Examples:
    >>> env = SimplePushEnv(num_envs=2)
    >>> env.group_map
    {'adversary': ['adversary_0'], 'agent': ['agent_0']}
    >>> env.observation_spec["adversary", "observation"].shape, env.observation_spec["agent", "observation"].shape
    (torch.Size([2, 1, 8]), torch.Size([2, 1, 19]))
    >>> env.rollout(3)["next", "agent", "reward"].shape
    torch.Size([2, 3, 1, 1])
"""
import torch

from torchrl_warp.cuda.simple_push import push_observe, push_place, push_reward
from torchrl_warp.envs.mpe import COLORS, SCENARIOS, Agent, Landmark, ScenarioKernels, common_parameters
from torchrl_warp.envs.mpe_goal import GoalScenario, goal_field

__all__ = ["SimplePushEnv"]


def _landmark_colors() -> torch.Tensor:
    """VMAS's landmark colours: 0.1 gray with landmark ``i``'s channel ``i + 1`` raised by 0.8
    (computed in float32, as VMAS does)."""
    colors = torch.full((2, 3), 0.1, dtype=torch.float32)
    for i in range(2):
        colors[i, i + 1] += 0.8
    return colors


class SimplePushEnv(GoalScenario):
    """VMAS ``simple_push``: an adversary (``adversary_0``) and a good agent (``agent_0``),
    radius 0.05, colliding with each other; two landmarks (radius 0.05, not colliding), one of
    them the goal; the world is unbounded.

    Groups ``"adversary"`` and ``"agent"``. The good agent observes (19 floats) its velocity,
    the goal's position minus its own, its own colour (gray with the goal's colour channel
    raised: VMAS tells it the goal twice), each landmark's position minus its own, each
    landmark's colour (``[0.1, 0.9, 0.1]`` and ``[0.1, 0.1, 0.9]``), the adversary's position
    minus its own. The adversary observes (8) its velocity, each landmark's relative position
    and the good agent's. Action: a 2-d force in ``[-1, 1]``, or one of 9. Rewards: the good
    agent gets minus its distance to the goal; the adversary gets the good agent's distance to
    the goal minus its own. Never terminates; the episode ends after ``max_steps``.

    Reset: agents and landmarks uniform in ``[-1, 1)^2``, at rest; the goal uniform over the two
    landmarks, per env (``state["goal"]``, see :mod:`torchrl_warp.envs.mpe_goal`: VMAS draws
    one for the whole batch). Rendering: VMAS's colours, the good agent's from its goal.
    """

    scenario = "simple_push"
    parameters = common_parameters()

    def _agents(self, p):
        return [Agent("adversary_0", observation_size=8, color=COLORS["red"]),
                Agent("agent_0", observation_size=19, color=COLORS["gray"])]

    def _landmarks(self, p):
        return [Landmark(f"landmark {i}", collide=False, color=tuple(c.tolist()))
                for i, c in enumerate(_landmark_colors())]

    def _goal_colors(self, goal):
        good = [0.25, 0.25, 0.25]
        good[goal + 1] += 0.5
        return [COLORS["red"], tuple(good)], [lm.color for lm in self.landmarks]

    def _kernels(self, p):
        return ScenarioKernels(
            reset=(push_place,), observe=(push_observe,),
            step=((push_observe, push_reward),),
            fields=[goal_field()],
            constants={"landmark_color": _landmark_colors(), "n_adversaries": 1},
        )


SCENARIOS["simple_push"] = SimplePushEnv
