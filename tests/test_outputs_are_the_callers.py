"""What an env hands out is the caller's: editing it in place never changes the env.

Two envs with the same seed take the same actions; after every call the caller of the
second edits every tensor it was handed (NaN into floats, flipped flags, shifted ints:
what a transform, a normaliser or a buggy policy might do). Every later output and
every state field must stay equal to the untouched env's.
"""
import pytest
import torch
from tensordict import TensorDict

from all_envs import ENVS, make
from conftest import SIM
from policies import pre_drawn_policy
from torchrl_warp.outputs import OUTPUT_FIELDS

STEPS = 6 if SIM else 40


def poison(td):
    for value in td.values(True, True):
        if value.dtype == torch.bool:
            value.logical_not_()
        elif value.is_floating_point():
            value.fill_(float("nan"))
        else:
            value.add_(7)


def assert_same(a, b, what):
    assert set(a.keys(True, True)) == set(b.keys(True, True)), what
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), f"{what}: {key} differs after the caller edited its outputs"


def assert_same_state(clean, edited, what):
    """Every state field but the outputs and the kernels' scratch space (a grid's order within
    a cell follows the order of atomics, which the GPU and the simulator do not fix)."""
    scratch = {f.name for f in clean.layout.all_fields() if f.scratch}
    for name, value in clean.state.items():
        if name not in OUTPUT_FIELDS and name not in scratch:
            assert torch.equal(value, edited.state[name]), f"{what}: state field {name!r} differs"


def actions(env, policy):
    return policy(TensorDict(batch_size=env.batch_size, device=env.device))


def twins(name, seed):
    """Two envs built alike, and a pre-drawn policy for each (the same actions)."""
    clean, edited = make(name, seed=seed), make(name, seed=seed)
    return clean, edited, pre_drawn_policy(clean, STEPS), pre_drawn_policy(edited, STEPS)


def masked_reset(env, outputs, mask):
    """``env.reset`` of the envs in ``mask``, handed the last outputs (less rewards) as TorchRL does."""
    rewards = ["reward"] + [(g, "reward") for g in env.layout.groups or ()]
    return env.reset(outputs.exclude(*rewards).set("_reset", mask))


@pytest.mark.sim
@pytest.mark.parametrize("name", ENVS)
def test_edits_to_step_and_reset_outputs_do_not_reach_the_env(name):
    clean, edited, policy_a, policy_b = twins(name, seed=11)
    a, b = clean.reset(), edited.reset()
    assert_same(a, b, "reset")
    poison(b)
    for t in range(STEPS):
        a = clean.step(actions(clean, policy_a))["next"]
        b = edited.step(actions(edited, policy_b))["next"]
        assert_same(a, b, f"step {t}")
        assert_same_state(clean, edited, f"step {t}")
        poison(b)
        if t % 3 == 2:  # a masked reset of env 0
            mask = torch.zeros(clean.num_envs, 1, dtype=torch.bool)
            mask[0] = True
            a, b = masked_reset(clean, a, mask), masked_reset(edited, b, mask.clone())
            # the env that was reset is the env's own; the others keep what the caller was handed
            assert_same(a[:1], b[:1], f"masked reset {t}")
            assert_same_state(clean, edited, f"masked reset {t}")
            poison(b)


@pytest.mark.sim
@pytest.mark.parametrize("name", ENVS)
def test_edits_to_step_and_maybe_reset_outputs_do_not_reach_the_env(name):
    clean, edited, policy_a, policy_b = twins(name, seed=5)
    root_a, root_b = clean.reset(), edited.reset()
    poison(root_b)
    for t in range(STEPS):
        data_a, root_a = clean.step_and_maybe_reset(policy_a(root_a))
        data_b, root_b = edited.step_and_maybe_reset(policy_b(root_b))
        assert_same(data_a["next"], data_b["next"], f"step {t}")
        assert_same(root_a.exclude(*clean.action_keys), root_b.exclude(*edited.action_keys), f"next root {t}")
        assert_same_state(clean, edited, f"step {t}")
        poison(data_b)
        poison(root_b)
