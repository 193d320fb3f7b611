"""VMAS's MPE ``simple_spread`` (VMAS 1.5.2): agents spread over as many landmarks.

Examples:
    >>> env = SimpleSpreadEnv(num_envs=2)
    >>> env.observation_spec["agents", "observation"].shape, env.full_action_spec["agents", "action"].shape
    (torch.Size([2, 3, 14]), torch.Size([2, 3, 2]))
"""
import torch

from torchrl_warp.cuda.simple_spread import spread_partials, spread_place, spread_reward
from torchrl_warp.envs.mpe import COLORS, SCENARIOS, Agent, Landmark, MPEScenario, ScenarioKernels, common_parameters
from torchrl_warp.layout import Field
from torchrl_warp.params import Param

__all__ = ["SimpleSpreadEnv"]


class SimpleSpreadEnv(MPEScenario):
    """VMAS ``simple_spread``: ``n_agents`` agents (radius 0.15, colliding) and as many landmarks.

    Group ``"agents"``. Observation (``4 + 2n + 2(n-1)`` floats, VMAS's order): own
    position, own velocity, each landmark's position minus the own, then (with
    ``obs_agents``) each other agent's. Action: a 2-d force in ``[-1, 1]``, or one of 9
    (VMAS's flat index of two 3-way components). Shared reward: ``-n_agents * sum_l
    min_a |a - l|`` minus 1 per ordered pair of overlapping agents. Never terminates;
    the episode ends after ``max_steps``.
    """

    scenario = "simple_spread"
    parameters = {
        "n_agents": Param(3, "agents, and landmarks", ge=1),
        "obs_agents": Param(True, "observe the other agents' relative positions"),
        **common_parameters(),
    }

    def _agents(self, p):
        size = 4 + 2 * p.n_agents + (2 * (p.n_agents - 1) if p.obs_agents else 0)
        return [Agent(f"agent_{i}", radius=0.15, observation_size=size, color=COLORS["blue"])
                for i in range(p.n_agents)]

    def _landmarks(self, p):
        return [Landmark(f"landmark {i}", collide=False, color=COLORS["black"]) for i in range(p.n_agents)]

    def _kernels(self, p):
        return ScenarioKernels(
            reset=(spread_place, spread_partials),
            step=(spread_partials, spread_reward),
            fields=[Field("reward_part", (), torch.float64, per_agent=True, scratch=True)],
        )


SCENARIOS["simple_spread"] = SimpleSpreadEnv
