"""VMAS's MPE ``simple_speaker_listener`` (VMAS 1.5.2): a speaker that sees the goal tells a
listener that moves where to go.

Examples:
    >>> env = SimpleSpeakerListenerEnv(num_envs=2)
    >>> env.group_map
    {'speaker': ['speaker_0'], 'listener': ['listener_0']}
    >>> env.full_action_spec["speaker", "action"].shape, env.full_action_spec["listener", "action"].shape
    (torch.Size([2, 1, 5]), torch.Size([2, 1, 2]))
    >>> td = env.rollout(3)
    >>> td["next", "speaker", "observation"].shape, td["next", "listener", "observation"].shape
    (torch.Size([2, 3, 1, 3]), torch.Size([2, 3, 1, 11]))
"""
import dataclasses
import numbers

import torch

from torchrl_warp.cuda.simple_speaker_listener import listener_observe, listener_place, listener_reward
from torchrl_warp.envs.mpe import COLORS, SCENARIOS, Agent, Landmark, MPEScenario, ScenarioKernels, World, \
    common_parameters
from torchrl_warp.layout import Field

__all__ = ["SimpleSpeakerListenerEnv"]

#: VMAS's landmark colours in this scenario (the goal's colour is the speaker's observation)
LANDMARK_COLORS = ((0.65, 0.15, 0.15), (0.15, 0.65, 0.15), (0.15, 0.15, 0.65))


class SimpleSpeakerListenerEnv(MPEScenario):
    """VMAS ``simple_speaker_listener``: a speaker (``speaker_0``, immovable) and a listener
    (``listener_0``), radius 0.075, with three landmarks (radius 0.04); nothing collides;
    messages of ``dim_c = 3``.

    Groups ``"speaker"`` and ``"listener"``. The speaker observes the goal landmark's colour
    (3 floats: red, green or blue) and acts with a force that moves nothing (it is immovable)
    plus a message: ``[u_x, u_y, c_0, c_1, c_2]`` with ``c`` in ``[0, 1]``, or one of
    ``3 * 3 * 3`` (the message one-hot). The listener is silent: it observes its velocity,
    each landmark's position minus its own, and the speaker's last message (11 floats), and
    acts with a 2-d force (or one of 9). Shared reward: ``-2 |listener - goal landmark|``
    (VMAS adds the listener's distance once per agent). Never terminates; the episode ends
    after ``max_steps``.

    Reset: agents and landmarks uniform in ``[-1, 1)^2``, the goal uniform over the three
    landmarks, drawn per env and episode (``state["goal"]``). VMAS draws one goal for the whole
    batch at each full reset and keeps it on single-env resets; here each env draws its own.
    ``render`` draws the listener in its goal's colour, lightened (VMAS's cue).
    """

    scenario = "simple_speaker_listener"
    parameters = common_parameters()

    def _agents(self, p):
        gray = COLORS["gray"]
        return [
            Agent("speaker_0", radius=0.075, collide=False, movable=False, silent=False, observation_size=3,
                  color=gray),
            Agent("listener_0", radius=0.075, collide=False, movable=True, silent=True, observation_size=11,
                  color=gray),
        ]

    def _landmarks(self, p):
        return [Landmark(f"landmark {i}", radius=0.04, collide=False, color=c) for i, c in enumerate(LANDMARK_COLORS)]

    def _world(self, p):
        return World(dim_c=3)

    def _kernels(self, p):
        return ScenarioKernels(
            reset=(listener_place,), observe=(listener_observe,),
            step=((listener_observe, listener_reward),),
            fields=[Field("goal", (), torch.int32)],
            constants={"landmark_color": torch.tensor(LANDMARK_COLORS, dtype=torch.float64)},
        )

    def render(self, mode: str = "rgb_array", env_index: int = 0, **kwargs):
        """:meth:`MPEScenario.render`, the listener in its goal landmark's colour plus 0.45 (VMAS's
        cue; clipped to 1)."""
        agents = self.agents
        if isinstance(env_index, numbers.Integral) and not isinstance(env_index, bool) \
                and 0 <= env_index < self.num_envs:
            goal = LANDMARK_COLORS[int(self.state["goal"][env_index])]
            self.agents = [agents[0], dataclasses.replace(agents[1], color=tuple(min(c + 0.45, 1.0) for c in goal))]
        try:
            return super().render(mode, env_index, **kwargs)
        finally:
            self.agents = agents


SCENARIOS["simple_speaker_listener"] = SimpleSpeakerListenerEnv
