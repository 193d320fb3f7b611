"""torchrl-warp's environments (installed as ``torchrl_warp.envs``)."""
from torchrl_warp.envs.cartpole import CartPoleEnv
from torchrl_warp.envs.mpe import MPEEnv
from torchrl_warp.envs.simple_spread import SimpleSpreadEnv
from torchrl_warp.envs.tag import TagEnv

__all__ = ["TagEnv", "CartPoleEnv", "MPEEnv", "SimpleSpreadEnv"]
