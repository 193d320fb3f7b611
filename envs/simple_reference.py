"""VMAS's MPE ``simple_reference`` (VMAS 1.5.2): two agents, each knowing where the *other*
must go, tell each other.

Examples:
    >>> env = SimpleReferenceEnv(num_envs=2)
    >>> env.group_map
    {'agents': ['agent_0', 'agent_1']}
    >>> env.full_action_spec["agents", "action"].shape
    torch.Size([2, 2, 12])
    >>> env.rollout(3)["next", "agents", "observation"].shape
    torch.Size([2, 3, 2, 21])
"""
import dataclasses
import numbers

import torch

from torchrl_warp.cuda.simple_reference import reference_observe, reference_place, reference_reward
from torchrl_warp.envs.mpe import COLORS, SCENARIOS, Agent, Landmark, MPEScenario, ScenarioKernels, World, \
    common_parameters
from torchrl_warp.layout import Field

__all__ = ["SimpleReferenceEnv"]

#: VMAS's landmark colours in this scenario (an agent observes its goal's colour)
LANDMARK_COLORS = (COLORS["red"], COLORS["green"], COLORS["blue"])


class SimpleReferenceEnv(MPEScenario):
    """VMAS ``simple_reference``: two agents (``agent_0``, ``agent_1``, radius 0.05) that move and
    talk, three landmarks (radius 0.05: red, green, blue); nothing collides; messages of
    ``dim_c = 10``.

    Group ``"agents"``. Each agent has a goal landmark that the *other* agent must reach.
    Observation (21 floats): own velocity, each landmark's position minus the own, the own
    goal landmark's colour (3), the other agent's last message (10). Action: a 2-d force in
    ``[-1, 1]`` and a message in ``[0, 1]^10`` (12 floats), or one of ``3 * 3 * 10`` (the
    message one-hot). Shared reward: ``-|agent_1 - goal_0| - |agent_0 - goal_1|``. Never
    terminates; the episode ends after ``max_steps``.

    Reset: agents and landmarks uniform in ``[-1, 1)^2``; each agent's goal uniform over the
    landmarks, drawn per env and episode (``state["goal"]``, ``[num_envs, 2]``). VMAS draws the
    two goals once for the whole batch at each full reset and keeps them on single-env resets;
    here each env draws its own. ``render`` draws each agent in the colour of the landmark
    it must reach (the other's goal; VMAS's cue).
    """

    scenario = "simple_reference"
    parameters = common_parameters()

    def _agents(self, p):
        return [Agent(f"agent_{i}", collide=False, silent=False, observation_size=21, color=COLORS["gray"])
                for i in range(2)]

    def _landmarks(self, p):
        return [Landmark(f"landmark {i}", collide=False, color=c) for i, c in enumerate(LANDMARK_COLORS)]

    def _world(self, p):
        return World(dim_c=10)

    def _kernels(self, p):
        return ScenarioKernels(
            reset=(reference_place,), observe=(reference_observe,),
            step=((reference_observe, reference_reward),),
            fields=[Field("goal", (), torch.int32, per_agent=True)],
            constants={"landmark_color": torch.tensor(LANDMARK_COLORS, dtype=torch.float64)},
        )

    def render(self, mode: str = "rgb_array", env_index: int = 0, **kwargs):
        """:meth:`MPEScenario.render`, each agent in the colour of the landmark it must reach
        (VMAS's cue)."""
        agents = self.agents
        if isinstance(env_index, numbers.Integral) and not isinstance(env_index, bool) \
                and 0 <= env_index < self.num_envs:
            goal = self.state["goal"][env_index].tolist()
            self.agents = [dataclasses.replace(a, color=LANDMARK_COLORS[goal[1 - i]]) for i, a in enumerate(agents)]
        try:
            return super().render(mode, env_index, **kwargs)
        finally:
            self.agents = agents


SCENARIOS["simple_reference"] = SimpleReferenceEnv
