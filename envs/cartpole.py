"""CartPole: gymnasium's CartPole-v1, thousands of copies at once.

Examples:
    >>> env = CartPoleEnv(num_envs=3)
    >>> env.observation_spec["observation"].shape, env.action_spec.shape
    (torch.Size([3, 4]), torch.Size([3]))
    >>> env.rollout(10)["next", "reward"].sum().item() > 0
    True
"""
import math

from torchrl.data import Categorical

from torchrl_warp.cuda.cartpole import reset_cartpole, step_cartpole
from torchrl_warp.cuda.observe_kinematics import observe_kinematics
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, Layout
from torchrl_warp.params import Param

__all__ = ["CartPoleEnv"]


class CartPoleEnv(WarpEnv):
    """The classic cart-pole, with gymnasium CartPole-v1's constants and semantics.

    Observation ``[x, x_dot, theta, theta_dot]`` (float32), action ``Categorical(2)``
    (0 pushes left, 1 right), reward 1 every step, terminated when the cart leaves
    ``[-2.4, 2.4]`` or the pole tilts over 12 degrees, truncated after ``max_steps``.
    A single-agent env: keys sit at the root; one GPU thread per env, many envs per block.
    """

    parameters = {
        "gravity": Param(9.8, "gravitational acceleration (m/s^2)", ge=0),
        "masscart": Param(1.0, "mass of the cart (kg)", gt=0),
        "masspole": Param(0.1, "mass of the pole (kg)", gt=0),
        "length": Param(0.5, "half the pole's length (m)", gt=0),
        "force_mag": Param(10.0, "force of a push (N)", ge=0),
        "tau": Param(0.02, "seconds per step (Euler integration)", gt=0),
        "x_threshold": Param(2.4, "terminated when the cart leaves [-x_threshold, x_threshold] (m)", gt=0),
        "theta_threshold_radians": Param(12 * 2 * math.pi / 360, "terminated when the pole tilts further (rad)",
                                         gt=0),
        "max_steps": Param(500, "truncated after this many steps", ge=1),
    }

    def _layout(self, p):
        return Layout(
            groups=None,
            observation_shape=(4,),
            action_spec=Categorical(2),
            # the cart's own state (x, x_dot, theta, theta_dot): the observation handed out is a
            # copy, so a caller that edits it cannot change the next step
            fields=[Field("kinematics", (4,), per_agent=True)],
            reset=(reset_cartpole,),
            observe=(observe_kinematics,),
            step=(step_cartpole,),
            outputs_from_state=True,
        )
