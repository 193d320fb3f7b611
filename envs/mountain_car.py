"""MountainCar: gymnasium's MountainCar-v0, thousands of copies at once.

Examples:
    >>> env = MountainCarEnv(num_envs=3)
    >>> env.observation_spec["observation"].shape, env.action_spec.shape
    (torch.Size([3, 2]), torch.Size([3]))
    >>> env.rollout(10)["next", "reward"].sum().item()
    -30.0
"""
import math

import numpy as np
from torchrl.data import Categorical

from torchrl_warp.cuda.mountain_car import reset_mountain_car, step_mountain_car
from torchrl_warp.cuda.observe_kinematics import observe_kinematics
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, Layout
from torchrl_warp.params import Param

__all__ = ["MountainCarEnv", "track_parameters", "draw_mountain_car"]


def draw_mountain_car(position: float, min_position: float = -1.2, max_position: float = 0.6,
                      goal_position: float = 0.5, resolution: int = 600) -> np.ndarray:
    """gymnasium's MountainCar picture (its 600 x 400 layout, scaled to ``resolution`` pixels
    wide and ``2 / 3`` of that high): the track ``0.45 sin(3 x) + 0.55`` over
    ``[min_position, max_position]``, the black car tilted along it at ``position``, its grey
    wheels, the yellow flag at ``goal_position``.

    >>> frame = draw_mountain_car(-0.5)
    >>> frame.shape, frame[400 - 378, 575].tolist()   # the flag
    ((400, 600, 3), [204, 204, 0])
    """
    from torchrl_warp.render import Canvas, check_resolution, rgb

    width = check_resolution(resolution)
    canvas = Canvas(width, max(1, round(width * 2 / 3)), (0.0, 600.0), (0.0, 400.0))
    scale = 600.0 / (max_position - min_position)

    def height(x):
        return np.sin(3 * x) * 0.45 + 0.55

    xs = np.linspace(min_position, max_position, 100)
    canvas.polyline(np.stack([(xs - min_position) * scale, height(xs) * scale], -1), max(2.0, canvas.pixel),
                    rgb(0, 0, 0))
    angle = math.cos(3 * position)  # gymnasium's tilt (radians)
    turn = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    base = np.array([(position - min_position) * scale, 10.0 + height(position) * scale])  # 10: clearance
    body = np.array([[-20.0, 0.0], [20.0, 0.0], [20.0, 20.0], [-20.0, 20.0]])
    canvas.polygon(body @ turn.T + base, rgb(0, 0, 0))
    for wheel in ((10.0, 0.0), (-10.0, 0.0)):
        canvas.disc(turn @ np.array(wheel) + base, 8.0, rgb(128, 128, 128))
    flag_x, flag_y = (goal_position - min_position) * scale, height(goal_position) * scale
    canvas.line((flag_x, flag_y), (flag_x, flag_y + 50.0), max(1.0, canvas.pixel), rgb(0, 0, 0))
    canvas.polygon([(flag_x, flag_y + 50.0), (flag_x, flag_y + 40.0), (flag_x + 25.0, flag_y + 45.0)],
                   rgb(204, 204, 0))
    return canvas.frame()


def track_parameters(goal_position: float) -> dict:
    """The track's parameters, shared by both MountainCars (their goals differ)."""
    return {
        "min_position": Param(-1.2, "the left wall: positions are clipped to [min_position, max_position]"),
        "max_position": Param(0.6, "the right end of the track"),
        "max_speed": Param(0.07, "velocities are clipped to [-max_speed, max_speed]", gt=0),
        "goal_position": Param(goal_position, "terminated at or past this position, moving at goal_velocity or "
                                              "faster"),
        "goal_velocity": Param(0.0, "the least velocity that counts at the goal"),
    }


class MountainCarEnv(WarpEnv):
    """An underpowered car in a valley, with gymnasium MountainCar-v0's constants and semantics.

    Observation ``[position, velocity]`` (float32), action ``Categorical(3)`` (0 pushes
    left, 1 not at all, 2 right: ``(action - 1) * force``), reward -1 every step,
    terminated when ``position >= goal_position`` and ``velocity >= goal_velocity``,
    truncated after ``max_steps``. The velocity is clipped to ``[-max_speed, max_speed]``,
    the position to ``[min_position, max_position]``; at the left wall a car moving left
    stops (velocity 0). Reset: position uniform in ``[-0.6, -0.4)``, velocity 0. The state
    is the field ``kinematics`` (``[num_envs, 1, 2]``); the observation handed out is a copy
    of it. A single-agent env: keys sit at the root; one GPU thread per env, many envs per block.
    """

    parameters = {
        **track_parameters(goal_position=0.5),
        "force": Param(0.001, "velocity change of a push, per step", ge=0),
        "gravity": Param(0.0025, "velocity change per step down a slope of cos(3 x)", ge=0),
        "max_steps": Param(200, "truncated after this many steps", ge=1),
    }

    def _check_params(self, p):
        if not p.min_position < p.max_position:
            raise ValueError(f"{type(self).__name__}: min_position must be less than max_position, got "
                             f"{p.min_position} and {p.max_position}")

    def render(self, mode: str = "rgb_array", env_index: int = 0, resolution: int = 600) -> np.ndarray:
        """An RGB frame ``[resolution * 2 / 3, resolution, 3]`` (uint8) of env ``env_index``:
        gymnasium's picture (:func:`draw_mountain_car`; 600 x 400 by default). Only that env's
        state is copied to the host. Only ``mode="rgb_array"``: there is no window."""
        from torchrl_warp.render import check_render_args

        i = check_render_args(self, mode, env_index, resolution)
        position = self.state.get("kinematics")[i, 0, 0].item()
        p = self.params
        return draw_mountain_car(position, p.min_position, p.max_position, p.goal_position, resolution)

    def _layout(self, p):
        return Layout(
            groups=None,
            observation_shape=(2,),
            action_spec=Categorical(3),
            fields=[Field("kinematics", (2,), per_agent=True)],
            reset=(reset_mountain_car,),
            observe=(observe_kinematics,),
            step=(step_mountain_car,),
            outputs_from_state=True,
        )
