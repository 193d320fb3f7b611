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
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Layout

__all__ = ["CartPoleEnv"]


class CartPoleEnv(WarpEnv):
    """The classic cart-pole, with gymnasium CartPole-v1's constants and semantics.

    Observation ``[x, x_dot, theta, theta_dot]`` (float32), action ``Categorical(2)``
    (0 pushes left, 1 right), reward 1 every step, terminated when the cart leaves
    ``[-2.4, 2.4]`` or the pole tilts over 12 degrees, truncated after ``max_steps``.
    A single-agent env: keys sit at the root; one GPU thread per env, many envs per block.
    """

    defaults = {
        "gravity": 9.8,
        "masscart": 1.0,
        "masspole": 0.1,
        "length": 0.5,
        "force_mag": 10.0,
        "tau": 0.02,
        "x_threshold": 2.4,
        "theta_threshold_radians": 12 * 2 * math.pi / 360,
        "max_steps": 500,
    }

    def _check_params(self, p):
        for name in ("masscart", "masspole", "length", "tau", "x_threshold", "theta_threshold_radians"):
            if getattr(p, name) <= 0:
                raise ValueError(f"CartPoleEnv: {name} must be > 0, got {getattr(p, name)}")
        if p.max_steps < 1:
            raise ValueError(f"CartPoleEnv: max_steps must be >= 1, got {p.max_steps}")

    def _layout(self, p):
        return Layout(
            groups=None,
            observation_shape=(4,),
            action_spec=Categorical(2),
            fields=[],
            reset=(reset_cartpole,),
            step=(step_cartpole,),
        )
