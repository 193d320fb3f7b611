"""A refused call changes nothing: random malformed inputs to ``step``, ``reset``,
``maybe_reset``, ``set_seed`` and the constructor are refused with a clear error, and
``env.state`` (outputs included), the seed and the kernels' arguments stay bit for bit
as they were."""
import random

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import OneHot

from all_envs import ENVS, make
from conftest import SIM

ROUNDS = 40 if SIM else 150
REFUSED = (TypeError, ValueError, KeyError)


def snapshot(env):
    state = {k: v.clone() for k, v in env.state.items()}
    return state, env._seed, env._outputs.generation, env._outputs.buffer.data_ptr()


def assert_unchanged(env, before, what):
    state, seed, generation, buffer = before
    assert env._seed == seed, f"{what}: the seed changed"
    assert env._outputs.generation == generation and env._outputs.buffer.data_ptr() == buffer, (
        f"{what}: the env moved to a new output buffer")
    for name, value in env.state.items():
        old = state[name]
        assert value.shape == old.shape and value.contiguous().view(torch.uint8).equal(old.contiguous().view(torch.uint8)), (
            f"{what}: state field {name!r} changed")


def valid_actions(env, rng):
    td = env.full_action_spec.rand()
    return TensorDict({k: td[k] for k in env.action_keys}, batch_size=env.batch_size)


def bad_mask(env, rng, key_shape=None):
    E = env.num_envs
    choice = rng.randrange(5)
    if choice == 0:
        return torch.full((E,), rng.choice([0.3, 2.0, -1.0]))          # floats that look truthy
    if choice == 1:
        return torch.ones(E, dtype=rng.choice([torch.int64, torch.uint8]))
    if choice == 2:
        return torch.ones(E, 2, 3, dtype=torch.bool)
    if choice == 3:
        return torch.ones(E + 1, dtype=torch.bool)
    return torch.ones(E, dtype=torch.bool, device="meta")


def corrupt_actions(env, td, rng):
    key = rng.choice(env.action_keys)
    a = td[key]
    choice = rng.randrange(7)
    if choice == 0:
        bad = a[..., :1] if a.ndim > 1 and a.shape[-1] > 1 else a.unsqueeze(-1).expand(*a.shape, 2)
    elif choice == 1 and isinstance(env.full_action_spec[key], OneHot):
        # a one-hot of floats is read as VmasEnv reads it (TorchRL's discrete SAC example steps
        # OneHotCategorical's samples); one with values other than 0 and 1 is refused
        bad = a.float() * 0.5
    elif choice == 1:
        bad = a.double() if a.is_floating_point() else a.float()
    elif choice == 2:
        bad = a.int()
    elif choice in (3, 4) and a.is_floating_point() and env.clamps_actions:
        # an env that clamps as its reference does (gymnasium's Pendulum) takes any finite value
        bad = a * float("nan") if choice == 3 else a + float("inf")
    elif choice == 3:
        bad = a + 10**6 if rng.random() < 0.7 or not a.is_floating_point() else a * float("nan")
    elif choice == 4:
        bad = a - 10**6
    elif choice == 5:
        bad = a.to("meta")
    else:
        bad = None
    out = td.clone()
    if bad is None:
        del out[key]
        return out
    if isinstance(key, tuple):  # a group's sub-TensorDict has the action's leading shape
        out.set(key[0], TensorDict({key[1]: bad}, batch_size=bad.shape[:2]))
    else:
        out = TensorDict({key: bad}, batch_size=env.batch_size)
    return out


BAD_SEEDS = [-1, 1.5, "42", True, 2**64, [1], np.float64(3.0), torch.tensor(3), -(2**70)]


def refuse(env, rng):
    """One malformed call, picked at random; returns what it was."""
    kind = rng.randrange(6)
    if kind == 0:
        td = corrupt_actions(env, valid_actions(env, rng), rng)
        return "bad action", lambda: env.step(td)
    if kind == 1:
        if rng.random() < 0.5:  # valid actions, a bad mask
            td, mask = valid_actions(env, rng), bad_mask(env, rng)
        else:  # a valid mask, then a bad action: the mask must not be half-applied
            td, mask = corrupt_actions(env, valid_actions(env, rng), rng), torch.ones(env.num_envs, dtype=torch.bool)
        loose = TensorDict(batch_size=[])  # no batch size: any mask shape fits
        for key in td.keys(True, True):
            loose.set(key, td[key])
        loose.set("_step", mask)
        return "bad _step mask", lambda: env._step(loose)
    if kind == 2:
        mask = bad_mask(env, rng)
        return "bad _reset", lambda: env._reset(TensorDict({"_reset": mask}, batch_size=[]))
    if kind == 3 and env.layout.groups:
        group = rng.choice(list(env.layout.groups))
        mask = bad_mask(env, rng)
        td = TensorDict({group: TensorDict({"_reset": mask}, batch_size=[])}, batch_size=[])
        return "bad group _reset", lambda: env._reset(td)
    if kind == 4:
        done = bad_mask(env, rng)
        return "bad done for maybe_reset", lambda: env.maybe_reset(TensorDict({"done": done}, batch_size=[]))
    seed = rng.choice(BAD_SEEDS)
    return f"bad seed {seed!r}", lambda: env.set_seed(seed)


@pytest.mark.sim
@pytest.mark.parametrize("name", ENVS)
def test_random_malformed_calls_are_refused_and_change_nothing(name):
    env = make(name, seed=3)
    env.reset()
    rng = random.Random(name)
    for i in range(ROUNDS):
        if i % 10 == 9:  # move on, so refusals meet many states
            env.step(valid_actions(env, rng))
        before = snapshot(env)
        what, call = refuse(env, rng)
        with pytest.raises(REFUSED) as refused:
            call()
        assert refused.value.args, what
        assert_unchanged(env, before, f"round {i}, {what}")


@pytest.mark.parametrize("mask, match", [
    (torch.tensor([0.3, 2.0, -1.0]), "mask '_reset' must be a bool tensor, got dtype torch.float32"),
    (torch.ones(3, 2, 3, dtype=torch.bool), r"mask '_reset' has shape \(3, 2, 3\), expected one of \(3,\), \(3, 1\)"),
])
def test_reset_masks_are_named_in_the_error(mask, match):
    env = make("cartpole")
    env.reset()
    with pytest.raises((TypeError, ValueError), match=match):
        env.reset(TensorDict({"_reset": mask}, batch_size=[3]))


def test_group_reset_of_the_wrong_shape_is_refused():
    env = make("tag_scan")
    env.reset()
    with pytest.raises(ValueError, match=r"mask \('taggers', '_reset'\) has shape \(2, 2, 3\)"):
        env._reset(TensorDict({"taggers": {"_reset": torch.ones(2, 2, 3, dtype=torch.bool)}}, batch_size=[]))
    for shape in [(2,), (2, 1), (2, 2), (2, 2, 1)]:  # the shapes a group's reset may have
        env._reset(TensorDict({"taggers": {"_reset": torch.ones(shape, dtype=torch.bool)}}, batch_size=[]))


@pytest.mark.parametrize("seed", BAD_SEEDS)
def test_a_refused_seed_leaves_the_old_one_and_the_episode_counters(seed):
    env = make("cartpole", seed=9)
    env.reset()
    env.reset()
    episodes = env.state["episode"].clone()
    with pytest.raises((TypeError, ValueError), match="seed must be an int in"):
        env.set_seed(seed)
    assert env._seed == 9 and torch.equal(env.state["episode"], episodes)
    with pytest.raises((TypeError, ValueError), match="seed must be an int in"):
        make("cartpole", seed=seed)


@pytest.mark.parametrize("seed", [0, 2**64 - 1, np.int64(7), np.uint64(2**63)])
def test_every_seed_in_range_is_taken_as_it_is(seed):
    assert make("cartpole", seed=seed)._seed == int(seed)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(check_actions="no"), TypeError, "check_actions must be True or False, got 'no'"),
    (dict(check_actions=1), TypeError, "check_actions must be True or False"),
    (dict(cuda_graphs=None), TypeError, "cuda_graphs must be True or False"),
    (dict(num_envs=-3), ValueError, "num_envs must be a positive int"),
    (dict(seed=1.7), TypeError, "seed must be an int"),
])
def test_bad_constructor_flags_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        make("cartpole", **kwargs)


# ----- issue 40, items 7 and 8: inputs still accepted, errors that named the wrong thing ------
from torchrl_warp.envs import TagEnv  # noqa: E402
from torchrl_warp.envs.mpe import MPEScenario  # noqa: E402

#: the envs that must be reset before they step (the MPE scenarios are reset when built, as VMAS's)
RESET_FIRST = [name for name, (cls, _) in ENVS.items() if not issubclass(cls, MPEScenario)]


@pytest.mark.parametrize("name", RESET_FIRST)
def test_a_step_before_the_first_reset_is_refused(name):
    env = make(name)
    before = snapshot(env)
    td = valid_actions(env, random.Random(0))
    for call in (lambda: env.step(td), lambda: env.step_and_maybe_reset(td), lambda: env.rand_step()):
        with pytest.raises(RuntimeError, match=rf"^{type(env).__name__}\.step: the env has not been reset yet: "
                                               r"call env\.reset\(\) before its first step"):
            call()
    assert_unchanged(env, before, "a step before the first reset")


def test_a_partial_first_reset_still_refuses_steps_until_every_env_was_reset():
    env = make("cartpole")
    env.reset(TensorDict({"_reset": torch.tensor([True, False, True])}, batch_size=[3]))
    with pytest.raises(RuntimeError, match="has not been reset yet"):
        env.rand_step()
    env.reset(TensorDict({"_reset": torch.tensor([False, True, False])}, batch_size=[3]))
    env.rand_step()  # every env has been reset once now


@pytest.mark.parametrize("name", ["cartpole", "simple_spread"])
def test_a_step_after_close_is_refused_until_a_reset_starts_the_env_again(name):
    env = make(name)
    assert not env.is_closed
    td = env.reset()
    env.close()
    assert env.is_closed
    before = snapshot(env)
    for call in (lambda: env.step(env.rand_action(td)), lambda: env.step_and_maybe_reset(env.rand_action(td)),
                 env.rand_step):
        with pytest.raises(RuntimeError, match=rf"^{type(env).__name__}\.step: the env was closed \(env\.close\(\), "
                                               r"which TorchRL's collectors call when they finish\): call "
                                               r"env\.reset\(\) to start it again"):
            call()
    assert_unchanged(env, before, "a step after close")
    env.reset(TensorDict({"_reset": torch.tensor([True, False, False])[: env.num_envs]}, batch_size=env.batch_size))
    assert not env.is_closed
    with pytest.raises(RuntimeError, match="has not been reset yet"):  # reopened: every env must reset first
        env.rand_step()
    assert env.rollout(2).batch_size == (env.num_envs, 2)  # the rollout resets


def test_an_env_a_collector_closed_runs_again_from_a_reset():
    """TorchRL's Collector closes its env when it has collected total_frames (VmasEnv keeps
    stepping after; TorchRL's batched envs restart on their next use): a rollout resets it."""
    from torchrl.collectors import Collector

    env = make("cartpole")
    collector = Collector(env, None, frames_per_batch=6, total_frames=6)
    for _ in collector:
        pass
    collector.shutdown()
    assert env.is_closed
    assert env.rollout(2).batch_size == (3, 2)


@pytest.mark.parametrize("max_steps", [0, -3, np.int64(0), 2.0, True, None])
def test_rollouts_of_no_steps_are_refused_by_name(max_steps):
    env = make("cartpole")  # TorchRL's own rollout: "list_of_tensordicts cannot be empty"
    with pytest.raises(ValueError, match=rf"^CartPoleEnv\.rollout: max_steps must be a positive int, got "):
        env.rollout(max_steps)


def test_numpy_ints_are_taken_for_num_envs_and_rollout_steps():
    env = make("cartpole", num_envs=np.int64(4))
    assert env.batch_size == (4,) and type(env.num_envs) is int
    assert env.rollout(np.int32(3), break_when_any_done=False).batch_size == (4, 3)
    with pytest.raises(ValueError, match=r"num_envs must be a positive int, got np\.int64\(0\)"):
        make("cartpole", num_envs=np.int64(0))
    with pytest.raises(ValueError, match="num_envs must be a positive int, got True"):
        make("cartpole", num_envs=True)


def test_an_action_without_its_agent_dimension_is_named():
    env = make("tag_scan")  # 2 envs, 2 taggers, 3 runners
    env.reset()
    bad = TensorDict({"taggers": {"action": torch.zeros(2, 2, dtype=torch.long)},
                      "runners": {"action": torch.zeros(2, 3, 2, dtype=torch.long)}}, batch_size=[2])
    with pytest.raises(ValueError, match=r"^TagEnv\.step: action \('taggers', 'action'\) has shape \(2, 2\), "
                                         r"expected \(2, 2, 2\) \(spec: MultiCategorical\): its agent dimension is "
                                         r"missing \(dim 1: the 2 agents of group 'taggers'\)$"):
        env.step(bad)

    def policy(td):  # writes into the group's [num_envs, n_agents] TensorDict: TensorDict refuses it
        td.set(("runners", "action"), torch.zeros(2, 2, dtype=torch.long))
        return td

    with pytest.raises(ValueError, match=r"^TagEnv\.rollout: the policy wrote an entry of shape \(2, 2\) into group "
                                         r"'runners', whose entries have the leading shape \(2, 3\) "
                                         r"\(\[num_envs, n_agents\]\); the agent dimension is missing; the env's "
                                         r"actions are \('runners', 'action'\): \(2, 3, 2\)"):
        env.rollout(2, policy)


def test_a_multicategorical_range_is_shown_per_component():
    env = make("tag_scan")
    td = env.rand_action(env.reset())
    td["runners", "action"] = torch.tensor([[[0, 25]] * 3] * 2)  # turn index 25 of 21
    with pytest.raises(ValueError) as refused:
        env.step(td)
    message = str(refused.value)
    assert "allowed [0, 20] in each of its 2 components (MultiCategorical, nvec [21, 21]); " \
           "out of range: component 1 (min 25, max 25)" in message, message
    assert "[0, [20, 20]]" not in message


@pytest.mark.parametrize("kwargs, match", [
    (dict(grid_length=1e39), r"parameter 'grid_length' must be a float that float32 holds, in "
                             r"\[-3\.4028234663852886e\+38, 3\.4028234663852886e\+38\] \(the state is float32\), "
                             r"got 1e\+39"),
    (dict(grid_length=1e20), r"parameter 'grid_length' must be a float in \(0, 1e\+18\] \(squared distances"),
    (dict(max_turn=1e10), r"parameter 'max_turn' must be a float in \[0, 6\.283185307179586\], got 10000000000\.0"),
    (dict(min_turn=-1e10), r"parameter 'min_turn' must be a float in \[-6\.28318530717958\d*, 6\.28318530717958\d*\]"),
])
def test_tag_parameters_its_float32_kernels_cannot_take_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=r"^TagEnv: " + match):
        TagEnv(num_envs=1, **kwargs)
