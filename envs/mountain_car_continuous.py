"""MountainCarContinuous: gymnasium's MountainCarContinuous-v0, thousands of copies at once.

Examples:
    >>> env = MountainCarContinuousEnv(num_envs=3)
    >>> env.observation_spec["observation"].shape, env.action_spec.shape
    (torch.Size([3, 2]), torch.Size([3, 1]))
    >>> td = env.reset().set("action", torch.full((3, 1), 2.5))  # out of [-1, 1]: pushes as 1 does
    >>> env.step(td)["next", "reward"].flatten().tolist()  # minus 0.1 x the action squared, as given
    [-0.625, -0.625, -0.625]
"""
import torch
from torchrl.data import Bounded

from torchrl_warp.cuda.mountain_car_continuous import reset_mountain_car, step_mountain_car_continuous
from torchrl_warp.cuda.observe_kinematics import observe_kinematics
from torchrl_warp.env import WarpEnv
from torchrl_warp.envs.mountain_car import MountainCarEnv, track_parameters
from torchrl_warp.layout import Field, Layout
from torchrl_warp.params import Param

__all__ = ["MountainCarContinuousEnv"]


class MountainCarContinuousEnv(WarpEnv):
    """MountainCar with a continuous throttle, with gymnasium MountainCarContinuous-v0's
    constants and semantics.

    Observation ``[position, velocity]`` (float32), action a float
    ``Bounded(-1, 1, shape=(1,))``: the force ``min(max(action, -1), 1) * power``
    (gymnasium's clip), reward 100 on the step that reaches the goal (``position >=
    goal_position`` with ``velocity >= goal_velocity``, which terminates) minus
    ``0.1 * action**2`` every step, truncated after ``max_steps``. Clipping, the left wall
    and the reset are MountainCar's (:class:`~torchrl_warp.envs.mountain_car.MountainCarEnv`);
    the goal is gymnasium's 0.45 here (0.5 in MountainCar-v0). The state is the field
    ``kinematics`` (``[num_envs, 1, 2]``); the observation handed out is a copy of it.

    Actions out of ``[-1, 1]`` are clipped as gymnasium clips them, not refused
    (``clamps_actions``): ``check_actions=True`` refuses only NaN and infinite actions.
    The reward's cost squares the action as given, also as gymnasium does (an action of
    2 pushes as 1 does and costs 0.4). With ``check_actions=False`` a NaN action is read as 0.
    """

    clamps_actions = True  # gymnasium clips the action: out-of-range ones are not errors

    parameters = {
        **track_parameters(goal_position=0.45),
        "power": Param(0.0015, "velocity change per step of a full (+-1) throttle", ge=0),
        "max_steps": Param(999, "truncated after this many steps", ge=1),
    }

    _check_params = MountainCarEnv._check_params
    render = MountainCarEnv.render  # the same track and state: gymnasium draws both alike

    def _layout(self, p):
        return Layout(
            groups=None,
            observation_shape=(2,),
            action_spec=Bounded(-1.0, 1.0, shape=(1,), dtype=torch.float32),
            fields=[Field("kinematics", (2,), per_agent=True)],
            reset=(reset_mountain_car,),
            observe=(observe_kinematics,),
            step=(step_mountain_car_continuous,),
            outputs_from_state=True,
        )
