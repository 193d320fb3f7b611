"""Pendulum: gymnasium's Pendulum-v1, thousands of copies at once.

Examples:
    >>> env = PendulumEnv(num_envs=3)
    >>> env.observation_spec["observation"].shape, env.action_spec.shape
    (torch.Size([3, 3]), torch.Size([3, 1]))
    >>> td = env.rollout(10)
    >>> td["next", "reward"].shape, td["next", "reward"].max().item() <= 0
    (torch.Size([3, 10, 1]), True)
"""
import math

import numpy as np
import torch
from torchrl.data import Bounded

from torchrl_warp.cuda.pendulum import observe_pendulum, reset_pendulum, step_pendulum
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, Layout
from torchrl_warp.params import Param

__all__ = ["PendulumEnv", "draw_pendulum"]


def draw_pendulum(theta: float, length: float = 1.0, resolution: int = 500) -> np.ndarray:
    """gymnasium's Pendulum picture, ``resolution`` pixels square (500 by default): the view
    spans ``+-(length + 1.2)``, the red rod (0.2 thick, round end) from the black axle,
    upright at ``theta = 0``, ``theta`` counter-clockwise.

    >>> frame = draw_pendulum(0.0)
    >>> frame[250 - 80, 250].tolist(), frame[250 + 80, 250].tolist()   # the rod above the axle; below: empty
    ([204, 77, 77], [255, 255, 255])
    """
    from torchrl_warp.render import Canvas, check_resolution, rgb

    side = check_resolution(resolution)
    bound = length + 1.2
    canvas = Canvas(side, side, (-bound, bound), (-bound, bound))
    end = length * np.array([-math.sin(theta), math.cos(theta)])
    canvas.line((0.0, 0.0), end, 0.2, rgb(204, 77, 77))
    canvas.disc(end, 0.1, rgb(204, 77, 77))
    canvas.disc((0.0, 0.0), 0.05, rgb(0, 0, 0))
    return canvas.frame()


class PendulumEnv(WarpEnv):
    """The inverted pendulum swing-up, with gymnasium Pendulum-v1's constants and semantics.

    Observation ``[cos theta, sin theta, thdot]`` (float32; ``theta`` 0 is upright),
    action a float ``Bounded(-max_torque, max_torque, shape=(1,))``, the torque, clipped
    to that range as gymnasium clips it; reward minus ``angle_normalize(theta)**2 + 0.1 *
    thdot**2 + 0.001 * torque**2`` (of the state before the step); ``thdot`` clipped to
    ``[-max_speed, max_speed]``; never terminated, truncated after ``max_steps``. Reset:
    ``theta`` uniform in ``[-pi, pi)``, ``thdot`` in ``[-1, 1)``. The state is the field
    ``kinematics`` (``[num_envs, 1, 2]``: ``theta, thdot``); unlike gymnasium's, its
    ``theta`` is kept within ``[-pi, pi]`` (whole turns change nothing but float32's
    precision: see :mod:`torchrl_warp.cuda.pendulum`).

    Actions out of range are clipped as gymnasium clips them, not refused
    (``clamps_actions``): ``check_actions=True`` refuses only NaN and infinite actions;
    with ``check_actions=False`` a NaN action is read as 0.
    """

    clamps_actions = True  # gymnasium clips the torque: out-of-range actions are not errors

    parameters = {
        "max_speed": Param(8.0, "thdot is clipped to [-max_speed, max_speed] (rad/s)", gt=0),
        "max_torque": Param(2.0, "actions (torques) lie in [-max_torque, max_torque]", gt=0),
        "dt": Param(0.05, "seconds per step (semi-implicit Euler)", gt=0),
        "g": Param(10.0, "gravitational acceleration (m/s^2)", ge=0),
        "m": Param(1.0, "mass of the pendulum (kg)", gt=0),
        "l": Param(1.0, "length of the pendulum (m)", gt=0),
        "max_steps": Param(200, "truncated after this many steps", ge=1),
    }

    def render(self, mode: str = "rgb_array", env_index: int = 0, resolution: int = 500) -> np.ndarray:
        """An RGB frame ``[resolution, resolution, 3]`` (uint8) of env ``env_index``:
        gymnasium's picture (:func:`draw_pendulum`, without its torque arrow). Only that env's
        state is copied to the host. Only ``mode="rgb_array"``: there is no window."""
        from torchrl_warp.render import check_render_args

        i = check_render_args(self, mode, env_index, resolution)
        theta, _ = self.state.get("kinematics")[i, 0].tolist()
        return draw_pendulum(theta, self.params.l, resolution)

    def _layout(self, p):
        return Layout(
            groups=None,
            observation_shape=(3,),
            action_spec=Bounded(-p.max_torque, p.max_torque, shape=(1,), dtype=torch.float32),
            fields=[Field("kinematics", (2,), per_agent=True)],
            reset=(reset_pendulum,),
            observe=(observe_pendulum,),
            step=(step_pendulum,),
            outputs_from_state=True,
        )
