"""VMAS's MPE ``simple_crypto`` (VMAS 1.5.2): alice sends bob a secret, encrypted with a key
they share, while eve listens.

Examples:
    >>> env = SimpleCryptoEnv(num_envs=2, continuous_actions=False)
    >>> env.group_map
    {'eve': ['eve_0'], 'bob': ['bob_0'], 'alice': ['alice_0']}
    >>> env.full_action_spec["alice", "action"].shape, env.full_action_spec["alice", "action"].space.n
    (torch.Size([2, 1]), 36)
    >>> td = env.rollout(3)
    >>> td["next", "eve", "observation"].shape, td["next", "bob", "observation"].shape
    (torch.Size([2, 3, 1, 4]), torch.Size([2, 3, 1, 8]))
"""
import torch

from torchrl_warp.cuda.simple_crypto import crypto_observe, crypto_place, crypto_reward
from torchrl_warp.envs.mpe import COLORS, SCENARIOS, Agent, MPEScenario, ScenarioKernels, World, common_parameters
from torchrl_warp.layout import Field
from torchrl_warp.params import Param

__all__ = ["SimpleCryptoEnv"]


class SimpleCryptoEnv(MPEScenario):
    """VMAS ``simple_crypto``: three immovable agents that only talk, messages of ``dim_c``
    floats; no landmarks, no physics.

    Groups ``"eve"`` (the adversary, ``eve_0``), ``"bob"`` (``bob_0``) and ``"alice"``
    (``alice_0``), in VMAS's agent order eve, bob, alice. Each env holds a ``key`` and a
    ``secret`` of ``dim_c`` random bits (``state["key"]``, ``state["secret"]``). alice observes
    the secret and the key (``2 dim_c``); bob the key and alice's last message (``2 dim_c``); eve
    alice's last message (``dim_c``). Every agent acts with a 2-d force (which moves nothing)
    and a message in ``[0, 1]^dim_c`` (or one of ``3 * 3 * dim_c``, the message one-hot): bob's
    and eve's messages are their guesses of the secret. Rewards: eve ``-|c_eve - secret|^2``;
    bob and alice (shared) ``|c_eve - secret|^2 - |c_bob - secret|^2``, where an all-zero
    message scores 0 (VMAS leaves out agents that said nothing, e.g. before their first step).
    Never terminates; the episode ends after ``max_steps``.

    Reset: key and secret bits uniform, drawn per env and episode; agents uniform in
    ``[-1, 1)^2`` (VMAS draws positions only on full resets and zeroes them on single-env
    ones; nothing observes them).
    """

    scenario = "simple_crypto"
    parameters = {
        "dim_c": Param(4, "message size: bits of the key and of the secret (VMAS's dim_c)", ge=1),
        **common_parameters(),
    }

    def _agents(self, p):
        sizes = {"eve_0": p.dim_c, "bob_0": 2 * p.dim_c, "alice_0": 2 * p.dim_c}
        colors = {"eve_0": COLORS["red"], "bob_0": COLORS["blue"], "alice_0": COLORS["green"]}
        return [Agent(name, collide=False, movable=False, silent=False, observation_size=size, color=colors[name])
                for name, size in sizes.items()]

    def _landmarks(self, p):
        return []

    def _world(self, p):
        return World(dim_c=p.dim_c)

    def _kernels(self, p):
        return ScenarioKernels(
            reset=(crypto_place,), observe=(crypto_observe,),
            step=((crypto_observe, crypto_reward),),
            fields=[Field("key", (p.dim_c,), torch.int32), Field("secret", (p.dim_c,), torch.int32)],
        )


SCENARIOS["simple_crypto"] = SimpleCryptoEnv
