"""Names of the shipped environments and their options, importable without torch.

The command lines (``python -m torchrl_warp.bench --help``) list them before they import
torch, TorchRL and Numba (seconds).

Examples:
    >>> "simple_spread" in SCENARIO_NAMES, NEIGHBOR_SEARCHES[0]
    (True, 'auto')
"""

__all__ = ["SCENARIO_NAMES", "NEIGHBOR_SEARCHES"]

#: VMAS's MPE scenarios; each is ``torchrl_warp.envs.<name>``
SCENARIO_NAMES = ("simple", "simple_adversary", "simple_crypto", "simple_push", "simple_reference",
                  "simple_speaker_listener", "simple_spread", "simple_tag", "simple_world_comm")
#: Tag's k-nearest searches (``TagEnv(neighbor_search=...)``)
NEIGHBOR_SEARCHES = ("auto", "grid", "scan")
