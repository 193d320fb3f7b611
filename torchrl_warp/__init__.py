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
import importlib
import importlib.abc
import importlib.util
import os
import sys

# In a source checkout envs/, cuda/ and recipes/ sit beside this directory; installed, they are
# inside it (pyproject's package-dir). With the checkout's root first on sys.path (python -m
# pytest from the root, whatever the install) this finder makes them the subpackages they are
# installed as.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHECKOUT_SUBPACKAGES = ("envs", "cuda", "recipes")


class _CheckoutSubpackages(importlib.abc.MetaPathFinder):
    """``torchrl_warp.envs`` -> ``<checkout>/envs`` (and ``cuda``, ``recipes``)."""

    def find_spec(self, name, path=None, target=None):
        package, _, sub = name.partition(".")
        if package != __name__ or sub not in _CHECKOUT_SUBPACKAGES:
            return None
        directory = os.path.join(_ROOT, sub)
        return importlib.util.spec_from_file_location(name, os.path.join(directory, "__init__.py"),
                                                      submodule_search_locations=[directory])


if not os.path.isdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "envs")) and all(
        os.path.isfile(os.path.join(_ROOT, sub, "__init__.py")) for sub in _CHECKOUT_SUBPACKAGES):
    sys.meta_path.append(_CheckoutSubpackages())

from torchrl_warp.check_env import check_env  # standard library only; binds the name over its module

#: the package's names -> their modules, imported on first use: ``python -m
#: torchrl_warp.<tool> --help`` then answers before torch, TorchRL and Numba load (seconds)
_EXPORTS = {"WarpEnv": "env", "Field": "layout", "GroupSpec": "layout", "Layout": "layout",
            "KernelSpec": "codegen", "Param": "params"}

__all__ = [*_EXPORTS, "check_env"]
__version__ = "0.1.0"


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'torchrl_warp' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"torchrl_warp.{_EXPORTS[name]}"), name)
    globals()[name] = value  # once
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
