"""MountainCar: gymnasium's MountainCar-v0, thousands of copies at once.

Examples:
    >>> env = MountainCarEnv(num_envs=3)
    >>> env.observation_spec["observation"].shape, env.action_spec.shape
    (torch.Size([3, 2]), torch.Size([3]))
    >>> env.rollout(10)["next", "reward"].sum().item()
    -30.0
"""
from torchrl.data import Categorical

from torchrl_warp.cuda.mountain_car import reset_mountain_car, step_mountain_car
from torchrl_warp.cuda.observe_kinematics import observe_kinematics
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, Layout
from torchrl_warp.params import Param

__all__ = ["MountainCarEnv", "track_parameters"]


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
