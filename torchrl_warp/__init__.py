"""torchrl-warp: WarpDrive-style multi-agent RL on one GPU, built on TorchRL.

Environments keep batched state in a TensorDict on the device and step it in
place with Numba kernels (CUDA on the GPU, ``numba.njit(parallel=True)`` on the
CPU, Numba's CUDA simulator in tests).

Examples:
    >>> from torchrl_warp.envs import TagEnv
    >>> env = TagEnv(num_envs=2, num_taggers=2, num_runners=3, num_other_agents_observed=2)
    >>> env.rollout(5)["next", "runners", "reward"].shape
    torch.Size([2, 5, 3, 1])
"""
from torchrl_warp.check_env import check_env
from torchrl_warp.codegen import KernelSpec
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, GroupSpec, Layout
from torchrl_warp.params import Param

__all__ = ["WarpEnv", "Field", "GroupSpec", "Layout", "KernelSpec", "Param", "check_env"]
__version__ = "0.1.0"
