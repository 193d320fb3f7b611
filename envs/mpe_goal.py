"""The part shared by the MPE scenarios around a goal landmark drawn on reset
(``simple_adversary``, ``simple_push``): ``state["goal"]`` and colours that depend on it.

VMAS draws one goal for the whole batch at each full reset (``reset_world_at(None)``) and
keeps it on single-env resets; here every env draws its own goal at each of its resets,
uniform over the landmarks (``state["goal"]``, ``[num_envs]`` int32, the goal's index among
the landmarks). The distribution of one env's goal is VMAS's.
"""
import numbers
from dataclasses import replace

import torch

from torchrl_warp.envs.mpe import MPEScenario
from torchrl_warp.layout import Field

__all__ = ["GoalScenario", "goal_field"]


def goal_field() -> Field:
    """``goal``: ``[num_envs]`` int32, the goal landmark's index among the landmarks."""
    return Field("goal", (), torch.int32)


class GoalScenario(MPEScenario):
    """An MPE scenario whose entities' colours depend on the env's goal: ``render`` draws
    env ``env_index`` with the colours of its goal (:meth:`_goal_colors`)."""

    def _goal_colors(self, goal: int) -> tuple[list, list]:
        """The agents' and the landmarks' colours when the goal is landmark ``goal``."""
        raise NotImplementedError

    def render(self, mode: str = "rgb_array", env_index: int = 0, *args, **kwargs):
        """:meth:`MPEScenario.render`, with the colours of env ``env_index``'s goal."""
        if not (isinstance(env_index, numbers.Integral) and not isinstance(env_index, bool)
                and 0 <= env_index < self.num_envs):
            return super().render(mode, env_index, *args, **kwargs)  # its own errors
        agents, landmarks = self._goal_colors(int(self.state["goal"][env_index]))
        saved = self.agents, self.landmarks
        self.agents = [replace(a, color=c) for a, c in zip(saved[0], agents)]
        self.landmarks = [replace(lm, color=c) for lm, c in zip(saved[1], landmarks)]
        try:
            return super().render(mode, env_index, *args, **kwargs)
        finally:
            self.agents, self.landmarks = saved
