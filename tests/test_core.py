"""WarpEnv's generic behaviour, exercised through TagEnv and CartPoleEnv."""
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.collectors import Collector
from torchrl.envs import RewardSum, TransformedEnv

from conftest import SIM
from policies import pre_drawn_policy
from torchrl_warp import WarpEnv
from torchrl_warp.envs import CartPoleEnv, TagEnv

TINY_TAG = dict(num_taggers=2, num_runners=4, num_other_agents_observed=2)
STEPS = 6 if SIM else 100


@pytest.mark.sim
def test_rollout_outputs_are_fresh_distinct_and_correct():
    """Rollouts keep references to outputs: each step's must be its own tensor."""
    env = CartPoleEnv(num_envs=3, seed=0)
    td = env.rollout(STEPS, policy=pre_drawn_policy(env, STEPS), break_when_any_done=False)
    obs, nxt = td["observation"], td["next", "observation"]
    # distinct: no two stored steps share values (aliasing would repeat the last one)
    flat = nxt.reshape(-1, 4)
    assert torch.unique(flat, dim=0).shape[0] == flat.shape[0]
    # correct: each stored next observation is one Euler step from the stored one
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("CartPole-v1").unwrapped
    ref.reset(seed=0)
    for e in range(3):
        for t in range(STEPS):
            ref.state = obs[e, t].double().numpy()
            ref.steps_beyond_terminated = None
            expected, *_ = ref.step(int(td["action"][e, t]))
            np.testing.assert_allclose(nxt[e, t].numpy(), expected, atol=1e-5)
            if t + 1 < STEPS and not td["next", "done"][e, t]:
                assert torch.equal(obs[e, t + 1], nxt[e, t])


@pytest.mark.sim
@pytest.mark.parametrize("make", [lambda: CartPoleEnv(num_envs=3, seed=1),
                                  lambda: TagEnv(num_envs=2, seed=1, episode_length=3, **TINY_TAG)],
                         ids=["cartpole", "tag"])
def test_outputs_handed_out_are_never_written_again(make):
    """What step, reset and step_and_maybe_reset return are views of output buffers the env
    then leaves alone: keep every returned TensorDict, and a copy of it made at once."""
    env = make()
    kept = []

    def keep(td):
        kept.append((td, td.clone()))
        return td

    root = keep(env.reset())
    for t in range(STEPS):
        data, root = env.step_and_maybe_reset(env.rand_action(root))
        keep(data.get("next"))
        keep(root)
        if t % 3 == 0:
            keep(env.step(env.rand_action(root.clone())).get("next"))
            partial = torch.zeros(env.num_envs, 1, dtype=torch.bool)
            partial[0] = True
            root = keep(env.reset(root.clone().set("_reset", partial)))
    assert len(kept) > 3
    for i, (td, copy) in enumerate(kept):  # the env's outputs; a root also carries the caller's action
        outputs = [k for k in copy.keys(True, True) if (k if isinstance(k, str) else k[-1]) != "action"]
        assert (td.select(*outputs) == copy.select(*outputs)).all(), f"returned TensorDict {i} changed later"
    buffers = {td.get("done").untyped_storage().data_ptr() for td, _ in kept}
    assert len(buffers) == len(kept)  # each hand-out its own buffer


@pytest.mark.sim
def test_a_tag_step_writes_every_output_so_needs_no_copy_of_the_last(monkeypatch):
    """TagEnv says outputs_from_state: a full step writes into an uninitialised buffer. With
    those buffers full of garbage (NaN floats, 0xFF flags) the rollout must not change."""
    from torchrl_warp.outputs import Outputs

    def rollout():
        env = TagEnv(num_envs=2, seed=2, episode_length=4, **TINY_TAG)
        return env.rollout(STEPS, policy=pre_drawn_policy(TagEnv(num_envs=2, seed=0, **TINY_TAG), STEPS),
                           break_when_any_done=False)

    reference = rollout()
    garbage = []
    monkeypatch.setattr(Outputs, "fresh", staticmethod(lambda b: garbage.append(1) or torch.full_like(b, 0xFF)))
    assert (rollout() == reference).all()
    assert len(garbage) >= STEPS - 1  # the steps did write into garbage-filled buffers


@pytest.mark.sim
def test_tag_rollout_stores_distinct_observations():
    torch.manual_seed(0)  # the rollout's random actions: a tagger that stays put twice is no failure
    env = TagEnv(num_envs=2, seed=0, **TINY_TAG)
    td = env.rollout(STEPS, break_when_any_done=False)
    pos_feature = td["next", "taggers", "observation"][..., :2]  # own x, y
    moved = (pos_feature[:, 1:] != pos_feature[:, :-1]).any(-1).any(-1)
    assert moved.float().mean() > 0.5
    assert not torch.equal(td["next", "taggers", "observation"][:, 0], td["next", "taggers", "observation"][:, -1])


@pytest.mark.sim
@pytest.mark.parametrize("make", [lambda s: CartPoleEnv(num_envs=3, seed=s),
                                  lambda s: TagEnv(num_envs=2, seed=s, **TINY_TAG)], ids=["cartpole", "tag"])
def test_same_seed_same_trajectory_bit_for_bit(make):
    a = make(7).rollout(STEPS, policy=pre_drawn_policy(make(0), STEPS), break_when_any_done=False)
    b = make(7).rollout(STEPS, policy=pre_drawn_policy(make(0), STEPS), break_when_any_done=False)
    c = make(8).rollout(STEPS, policy=pre_drawn_policy(make(0), STEPS), break_when_any_done=False)
    assert (a == b).all()
    assert not (a == c).all()
    # set_seed restarts the random stream: a reseeded env replays the same trajectory
    env = make(123)
    env.rollout(3)
    env.set_seed(7)
    d = env.rollout(STEPS, policy=pre_drawn_policy(make(0), STEPS), break_when_any_done=False)
    assert (a == d).all()


@pytest.mark.sim
def test_partial_reset_through_reset_keys():
    env = TagEnv(num_envs=3, seed=0, **TINY_TAG)
    env.rollout(3, break_when_any_done=False)
    before = env.state.clone()
    out = env._reset(TensorDict({"_reset": torch.tensor([[True], [False], [True]])}, batch_size=[3]))
    assert env.state["step_count"].tolist() == [0, 3, 0]
    assert env.state["episode"].tolist() == [2, 1, 2]
    assert torch.equal(env.state["pos"][1], before["pos"][1])
    assert not torch.equal(env.state["pos"][0], before["pos"][0])
    assert torch.equal(out["taggers", "observation"][1], before["observation"][1, :2])
    assert not out["done"].any()
    # a group-level reset resets the whole env (agents are never reset one by one)
    env.reset(TensorDict({"runners": {"_reset": torch.tensor([[[False]] * 4, [[True]] + [[False]] * 3, [[False]] * 4])}},
                         batch_size=[3]))
    assert env.state["step_count"].tolist() == [0, 0, 0]


@pytest.mark.sim
def test_maybe_reset_resets_only_done_envs():
    env = CartPoleEnv(num_envs=3, seed=0)
    td = env.reset()
    env.rollout(2, break_when_any_done=False)
    td = env.state.select().update({"done": torch.tensor([[False], [True], [False]]), "observation": env.state["observation"][:, 0].clone()})
    before = env.state["observation"].clone()
    out = env.maybe_reset(td)
    assert env.state["step_count"].tolist() == [2, 0, 2]
    assert torch.equal(out["observation"][0], before[0, 0]) and torch.equal(out["observation"][2], before[2, 0])
    assert not torch.equal(out["observation"][1], before[1, 0])
    assert not out["done"].any()


def _generic_step_and_maybe_reset(env, td):
    """TorchRL's own path: EnvBase.step (with _step_proc_data), step_mdp, EnvBase.maybe_reset."""
    from torchrl.envs import EnvBase

    td = EnvBase.step(env, td)
    return td, EnvBase.maybe_reset(env, env._step_mdp(td))


@pytest.mark.sim
@pytest.mark.parametrize("make", [lambda: CartPoleEnv(num_envs=4, seed=3),
                                  lambda: TagEnv(num_envs=3, seed=3, episode_length=4, **TINY_TAG)],
                         ids=["cartpole", "tag"])
def test_fast_step_and_maybe_reset_equals_torchrls_generic_path(make):
    """Same data and next root as EnvBase's path, across resets, with extra policy entries carried."""
    fast_env, ref_env = make(), make()
    policy_a, policy_b = pre_drawn_policy(fast_env, STEPS), pre_drawn_policy(ref_env, STEPS)
    fast, ref = fast_env.reset(), ref_env.reset()
    group = fast_env.layout.groups and next(iter(fast_env.layout.groups))
    resets = 0
    for t in range(STEPS):
        fast, ref = policy_a(fast), policy_b(ref)
        for td in (fast, ref):  # what a policy adds besides actions: step_mdp carries it
            td.set("policy_step", torch.full((td.shape[0], 1), t))
            if group:
                td.set((group, "logits"), torch.full((*td[group].shape, 3), float(t)))
        data_fast, fast = fast_env.step_and_maybe_reset(fast)
        data_ref, ref = _generic_step_and_maybe_reset(ref_env, ref)
        assert set(data_fast.keys(True, True)) == set(data_ref.keys(True, True))
        assert set(fast.keys(True, True)) == set(ref.keys(True, True))
        assert (data_fast == data_ref).all(), f"step {t}"
        carried = ["action", "policy_step"] if not group else [(g, "action") for g in fast_env.layout.groups]
        carried += [(group, "logits")] if group else []
        # outputs equal everywhere; carried entries too, except where an env was reset:
        # TorchRL pads them with 0 there (unless every env resets), we keep them
        assert (fast.exclude(*carried) == ref.exclude(*carried)).all(), f"step {t}"
        kept = ~data_fast["next", "done"].reshape(-1)
        for key in carried:
            assert torch.equal(fast[key][kept], ref[key][kept]), (t, key)
            assert fast[key] is data_fast[key]  # carried, not copied, as step_mdp does
        assert fast["policy_step"].eq(t).all()
        resets += int(data_fast["next", "done"].sum())
    if not SIM:
        assert resets > 0  # the comparison spanned resets


def test_fast_step_keeps_preset_next_entries_and_falls_back_for_partial_steps():
    env = CartPoleEnv(num_envs=2, seed=0)
    td = env.rand_action(env.reset())
    td.set(("next", "extra"), torch.ones(2, 1))
    out = env.step(td)
    assert out["next", "extra"].eq(1).all() and "observation" in out["next"].keys()
    td = env.rand_action(env.reset())
    td.set("_step", torch.tensor([True, False]))
    out = env.step(td)  # TorchRL's generic path, then our masked step kernel
    assert env.state["step_count"].tolist() == [1, 0]
    assert torch.equal(out["next", "observation"][1], out["observation"][1])  # env 1 did not move
    assert not torch.equal(out["next", "observation"][0], out["observation"][0])
    assert out["next", "reward"].tolist() == [[1.0], [0.0]]
    env.step(env.rand_action(out.exclude("_step", "next")))  # the mask does not stick
    assert env.state["step_count"].tolist() == [2, 1]


@pytest.mark.sim
def test_rollout_until_all_done_uses_partial_steps():
    """break_when_all_done steps only the envs not yet done (TorchRL's "_step" mask)."""
    env = CartPoleEnv(num_envs=3, seed=1)
    td = env.rollout(500, break_when_any_done=False, break_when_all_done=True)
    done = td["next", "done"].squeeze(-1)
    first_done = done.float().argmax(1)
    assert done.any(1).all()
    assert len(set(first_done.tolist())) > 1  # envs ended at different steps
    # each env stopped moving at its end: TorchRL repeats its last entry after that
    assert env.state["step_count"].tolist() == (first_done + 1).tolist()
    for e in range(3):
        last = td[e, int(first_done[e])]
        assert (td[e, int(first_done[e]):] == last).all()


# ----- bad input ------------------------------------------------------------------------
def _tag_step_input(env):
    return env.full_action_spec.zero()


@pytest.mark.sim
@pytest.mark.parametrize(
    "corrupt, error, match",
    [
        (lambda a: a[:, :1], ValueError, r"action \('taggers', 'action'\) has shape \(2, 1, 2\), expected \(2, 2, 2\)"),
        (lambda a: a.float(), TypeError, r"has dtype torch.float32, expected torch.int64"),
        (lambda a: a.to("meta"), ValueError, r"is on device meta, expected cpu"),
        (lambda a: a + 21, ValueError, r"values outside its spec: min 21, max 21"),
        (lambda a: a - 1, ValueError, r"values outside its spec"),
    ],
    ids=["shape", "dtype", "device", "too_high", "negative"],
)
def test_bad_actions_are_rejected_and_leave_state_untouched(corrupt, error, match):
    env = TagEnv(num_envs=2, seed=0, **TINY_TAG)
    env.reset()
    before = env.state.clone()
    td = _tag_step_input(env)
    td.set_("runners", td["runners"].set("action", td["runners", "action"] + 3))  # valid, nonzero
    bad = corrupt(td["taggers", "action"])
    td = TensorDict({"taggers": TensorDict({"action": bad}, batch_size=bad.shape[:2]),
                     "runners": td["runners"]}, batch_size=[2])
    with pytest.raises(error, match=match):
        env._step(td)
    assert (env.state == before).all()  # nothing half-written: runners' valid actions were not copied


def test_missing_action_is_named():
    env = TagEnv(num_envs=2, **TINY_TAG)
    env.reset()
    with pytest.raises(KeyError, match="no action \\('runners', 'action'\\)"):
        env._step(TensorDict({"taggers": {"action": torch.zeros(2, 2, 2, dtype=torch.long)}}, batch_size=[2]))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(num_envs=0), ValueError, "num_envs must be a positive int"),
        (dict(num_envs=2.0), ValueError, "num_envs must be a positive int"),
        (dict(device="cuda:7"), ValueError, "cuda:7"),
        (dict(device="mps"), ValueError, "unsupported device 'mps'"),
        (dict(device="banana"), ValueError, "invalid device 'banana'"),
        (dict(backend="opencl"), ValueError, "unknown backend 'opencl'"),
        (dict(backend="cuda"), ValueError, "backend 'cuda' needs a CUDA device"),
        (dict(num_envs=10**6, num_runners=990), MemoryError, r"TagEnv\(num_envs=1000000, 1000 agents per env\) needs about .* GiB"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, match):
    if "cuda:7" in str(kwargs.get("device")) and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    with pytest.raises(error, match=match):
        TagEnv(**kwargs)


@pytest.mark.skipif(SIM, reason="the simulator is this backend")
def test_simulator_backend_needs_the_environment_variable():
    with pytest.raises(RuntimeError, match="NUMBA_ENABLE_CUDASIM=1"):
        CartPoleEnv(num_envs=1, backend="cudasim")


def test_phase_asking_for_an_unknown_name_is_reported():
    import numba

    from torchrl_warp import Layout
    from torchrl.data import Categorical

    @numba.njit
    def bad_phase(env, agent, observation, not_a_field):
        observation[env, agent, 0] = not_a_field

    class Broken(WarpEnv):
        def _layout(self, p):
            return Layout(None, (1,), Categorical(2), [], (bad_phase,), (bad_phase,))

    with pytest.raises(TypeError, match="asks for 'not_a_field'"):
        Broken(num_envs=1)


@pytest.mark.parametrize("reserved", ["lane", "num_envs", "seed", "phase_0"])
def test_names_that_would_shadow_the_drivers_are_rejected(reserved):
    from torchrl.data import Categorical

    from torchrl_warp import Layout
    from torchrl_warp.cuda.cartpole import reset_cartpole

    from torchrl_warp.params import Param

    class Shadowing(WarpEnv):
        parameters = {reserved: Param(1.0, "a name the drivers use")}

        def _layout(self, p):
            return Layout(None, (4,), Categorical(2), [], (reset_cartpole,), (reset_cartpole,))

    with pytest.raises(ValueError, match=f"parameter '{reserved}' takes a name the generated kernels use"):
        Shadowing(num_envs=1)


def test_a_parameter_may_not_also_be_a_state_field():
    with pytest.raises(ValueError, match="'pos' is both a state field and a parameter"):
        from torchrl_warp.params import Param

        type("PosTag", (TagEnv,), {"parameters": {**TagEnv.parameters, "pos": Param(1.0, "shadows a field")}})(
            num_envs=1)


def test_unchecked_actions_skip_the_value_check():
    env = CartPoleEnv(num_envs=2, check_actions=False)
    env.reset()
    out = env.step(TensorDict(action=torch.tensor([5, -3]), batch_size=[2]))  # not 1: pushes left
    assert out["next", "observation"].shape == (2, 4)
    with pytest.raises(ValueError, match="outside its spec"):
        checked = CartPoleEnv(num_envs=2)
        checked.reset()
        checked.step(TensorDict(action=torch.tensor([5, -3]), batch_size=[2]))


# ----- TorchRL integration ---------------------------------------------------------------
def test_collector_with_transform():
    env = TransformedEnv(
        TagEnv(num_envs=4, seed=0, **TINY_TAG),
        RewardSum(in_keys=[("taggers", "reward"), ("runners", "reward")],
                  out_keys=[("taggers", "episode_reward"), ("runners", "episode_reward")]),
    )
    collector = Collector(env, policy=None, frames_per_batch=40, total_frames=80)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2
    batch = batches[0]
    assert batch.batch_size == (4, 10)
    assert batch["next", "runners", "episode_reward"].shape == (4, 10, 4, 1)
    # the summed reward is the running sum of the per-step rewards
    r = batch["next", "taggers", "reward"]
    torch.testing.assert_close(batch["next", "taggers", "episode_reward"][:, 0], r[:, 0])


@pytest.mark.parametrize("name", ["cartpole", "tag_scan"])
def test_handed_out_tensordicts_are_ordinary_and_vecnorm_runs_on_them(name):
    """Every TensorDict handed out has a torch.Size batch size (a tuple broke TensorDict.view,
    and with it TorchRL's VecNorm)."""
    import warnings

    from torchrl.envs import VecNorm

    from all_envs import make

    env = make(name)
    data, root = env.step_and_maybe_reset(env.rand_action(env.reset()))
    for td in (data["next"], root, env.reset()):
        for sub in [td] + [td[g] for g in env.layout.groups or ()]:
            assert type(sub.batch_size) is torch.Size
    key = "observation" if env.layout.groups is None else (next(iter(env.layout.groups)), "observation")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # VecNorm's deprecation notice
        out = TransformedEnv(make(name), VecNorm(in_keys=[key])).rollout(4)
    assert torch.isfinite(out["next", *((key,) if isinstance(key, str) else key)]).all()
