"""CartPole: gymnasium's CartPole-v1, thousands of copies at once.

Examples:
    >>> env = CartPoleEnv(num_envs=3)
    >>> env.observation_spec["observation"].shape, env.action_spec.shape
    (torch.Size([3, 4]), torch.Size([3]))
    >>> env.rollout(10)["next", "reward"].sum().item() > 0
    True
"""
import math

import numpy as np
from torchrl.data import Categorical

from torchrl_warp.cuda.cartpole import reset_cartpole, step_cartpole
from torchrl_warp.cuda.observe_kinematics import observe_kinematics
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, Layout
from torchrl_warp.params import Param

__all__ = ["CartPoleEnv", "draw_cartpole"]


def draw_cartpole(x: float, theta: float, length: float, x_threshold: float, resolution: int = 600) -> np.ndarray:
    """gymnasium's CartPole picture (its 600 x 400 layout, scaled to ``resolution`` pixels
    wide and ``2 / 3`` of that high; the view spans ``[-x_threshold, x_threshold]``): the
    track, the black cart at ``x``, the pole (``2 length`` long) tilted ``theta`` to the
    right (clockwise), the axle.

    >>> frame = draw_cartpole(0.0, 0.0, 0.5, 2.4)
    >>> frame.shape, frame[400 - 100, 300].tolist(), frame[400 - 200, 300].tolist()   # the cart, the pole
    ((400, 600, 3), [0, 0, 0], [202, 152, 101])
    """
    from torchrl_warp.render import Canvas, check_resolution, rgb

    width = check_resolution(resolution)
    canvas = Canvas(width, max(1, round(width * 2 / 3)), (0.0, 600.0), (0.0, 400.0))
    scale = 600.0 / (2 * x_threshold)
    cart_x, cart_y = x * scale + 300.0, 100.0
    axle = np.array([cart_x, cart_y + 30.0 / 4])
    canvas.line((0.0, cart_y), (600.0, cart_y), max(1.0, canvas.pixel), rgb(0, 0, 0))
    canvas.rectangle(cart_x - 25.0, cart_y - 15.0, cart_x + 25.0, cart_y + 15.0, rgb(0, 0, 0))
    pole_length = scale * 2 * length
    up = np.array([math.sin(theta), math.cos(theta)])  # gymnasium rotates the pole by -theta
    canvas.line(axle - 5.0 * up, axle + (pole_length - 5.0) * up, 10.0, rgb(202, 152, 101))
    canvas.disc(axle, 5.0, rgb(129, 132, 203))
    return canvas.frame()


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

    def render(self, mode: str = "rgb_array", env_index: int = 0, resolution: int = 600) -> np.ndarray:
        """An RGB frame ``[resolution * 2 / 3, resolution, 3]`` (uint8) of env ``env_index``:
        gymnasium's picture (:func:`draw_cartpole`; 600 x 400 by default). Only that env's
        state is copied to the host. Only ``mode="rgb_array"``: there is no window."""
        from torchrl_warp.render import check_render_args

        i = check_render_args(self, mode, env_index, resolution)
        x, _, theta, _ = self.state.get("kinematics")[i, 0].tolist()
        return draw_cartpole(x, theta, self.params.length, self.params.x_threshold, resolution)

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
