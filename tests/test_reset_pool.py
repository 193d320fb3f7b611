"""Reset pools: resetting envs start from entries of a pool, drawn on the device.

Every env of the package takes a pool built from another env's start states: after a
reset, each env's pooled fields equal one pool entry, and its observation is the one
that entry's env observed (the observe phases ran on the pooled state). The draws are
uniform, seeded, per env and per episode; bad pools are refused before anything changes.
"""
import math

from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Bounded

from all_envs import ENVS, make
from torchrl_warp import Field, Layout, WarpEnv
from torchrl_warp.envs import CartPoleEnv, TagEnv

# one entry per env class (the kernels' pool copy does not depend on the rest)
_FIRST = {}
for _name, (_cls, _) in ENVS.items():
    _FIRST.setdefault(_cls, _name)
FIRST_OF_EACH_CLASS = list(_FIRST.values())
SIM_ENVS = ("cartpole", "tag_grid", "simple_spread")


def own_fields(env):
    return [f.name for f in env.layout.fields if not (f.scratch or f.derived)]


def donor_pool(name, size=5, seed=123):
    """A pool of ``size`` start states of env ``name`` (one reset of a donor env), and the
    observations the donor made of them."""
    donor = make(name, num_envs=size, seed=seed)
    donor.reset()
    pool = {k: donor.state[k].clone() for k in own_fields(donor)}
    return pool, donor.state["observation"].clone()


def drawn_entries(env, pool):
    """For each env, the index of the pool entry its pooled fields equal (asserts there is one)."""
    entries = []
    for e in range(env.num_envs):
        match = [k for k in range(next(iter(pool.values())).shape[0])
                 if all(torch.equal(env.state[f][e], v[k]) for f, v in pool.items())]
        assert len(match) == 1, f"env {e}: its start state equals pool entries {match} (expected one)"
        entries.append(match[0])
    return entries


def check_pooled_reset(name):
    probe = make(name)
    if not own_fields(probe):
        with pytest.raises(ValueError, match="no state fields of its own"):
            probe.set_reset_pool({"x": torch.zeros(1)})
        return
    pool, observed = donor_pool(name)
    env = make(name, seed=7, reset_pool=pool)
    env.reset()
    for e, k in enumerate(drawn_entries(env, pool)):
        assert torch.equal(env.state["observation"][e], observed[k]), f"{name}: env {e} observes otherwise"


@pytest.mark.parametrize("name", FIRST_OF_EACH_CLASS)
def test_every_env_starts_from_its_pool_and_observes_that_start(name):
    check_pooled_reset(name)


@pytest.mark.sim
@pytest.mark.parametrize("name", SIM_ENVS)
def test_pooled_reset_in_the_simulator(name, expected_backend):
    assert make(name).backend == expected_backend
    check_pooled_reset(name)


def test_draws_are_uniform_per_env_and_episode():
    starts = torch.linspace(-0.04, 0.04, 4).reshape(4, 1, 1).expand(4, 1, 4).contiguous()
    env = CartPoleEnv(num_envs=4000, seed=3, reset_pool={"kinematics": starts})
    env.reset()
    first = torch.tensor(drawn_entries(env, {"kinematics": starts}))
    counts = torch.bincount(first, minlength=4).double()
    chi2 = ((counts - 1000) ** 2 / 1000).sum().item()
    assert chi2 < 16.3, f"entry counts {counts.tolist()} are not uniform (chi2 {chi2:.1f}, p < 0.001)"
    env.reset()
    second = torch.tensor(drawn_entries(env, {"kinematics": starts}))
    assert 0.2 < (first == second).double().mean().item() < 0.3  # a new draw each episode: 1/4 agree


def test_draws_follow_the_seed():
    pool, _ = donor_pool("pendulum", size=50)
    a, b, c = (make("pendulum", num_envs=64, seed=s, reset_pool=pool) for s in (1, 1, 2))
    for env in (a, b, c):
        env.reset()
    assert torch.equal(a.state["kinematics"], b.state["kinematics"])
    assert not torch.equal(a.state["kinematics"], c.state["kinematics"])


def test_a_partial_reset_draws_only_for_the_envs_it_resets():
    pool, _ = donor_pool("tag_grid", size=6)
    env = make("tag_grid", num_envs=4, seed=0, reset_pool=pool)
    td = env.reset()
    env.rollout(3, break_when_any_done=False, auto_reset=False, tensordict=td)
    before = env.state.clone()
    mask = torch.tensor([True, False, True, False])
    env.reset(TensorDict({"_reset": mask.unsqueeze(-1)}, batch_size=[4]))
    for f in own_fields(env):
        assert torch.equal(env.state[f][~mask], before[f][~mask]), f"{f} changed in an env not reset"
    resets = SimpleNamespace(state={k: v[mask] for k, v in env.state.items()}, num_envs=2)
    drawn_entries(resets, pool)


def test_envs_that_end_restart_from_the_pool_in_step_and_maybe_reset():
    # poles already past 12 degrees: every episode terminates at its first step
    starts = torch.tensor([[[0.0, 0.0, 0.3, 0.0]], [[0.0, 0.0, -0.3, 0.0]]])
    env = CartPoleEnv(num_envs=8, seed=0, reset_pool={"kinematics": starts})
    root = env.reset()
    for _ in range(3):
        data, root = env.step_and_maybe_reset(env.rand_action(root))
        assert data["next", "terminated"].all()
        drawn_entries(env, {"kinematics": starts})
        assert torch.equal(root["observation"], env.state["kinematics"][:, 0])


def test_the_env_keeps_its_own_copy_and_none_removes_the_pool():
    starts = torch.tensor([[[0.01, 0.02, 0.03, 0.04]]])
    env = CartPoleEnv(num_envs=3, seed=5, reset_pool={"kinematics": starts})
    starts.fill_(1.0)  # the caller's tensor: not the env's any more
    assert torch.allclose(env.reset()["observation"], torch.tensor([0.01, 0.02, 0.03, 0.04]))
    assert env.reset_pool["kinematics"].shape == (1, 1, 4)
    env.set_reset_pool(None)
    assert env.reset_pool is None
    plain = CartPoleEnv(num_envs=3, seed=5)
    plain.reset()  # the same episode counters as env's
    assert torch.equal(env.reset()["observation"], plain.reset()["observation"])


def test_a_pool_may_hold_some_fields_only():
    pool, _ = donor_pool("tag_grid", size=3)
    env = make("tag_grid", seed=1, reset_pool={"pos": pool["pos"]})
    env.reset()
    assert env.state["in_game"].all()  # the env's own start: everyone in the game
    drawn_entries(env, {"pos": pool["pos"]})


BAD_POOLS = [
    ({"velocity": torch.zeros(2, 1, 4)}, ValueError, "'velocity' is not one of the env's own start-state fields"),
    ({"step_count": torch.zeros(2, dtype=torch.int32)}, ValueError, "'step_count' is not one of"),
    ({"observation": torch.zeros(2, 1, 4)}, ValueError, "'observation' is not one of"),
    ({"kinematics": torch.zeros(2, 4)}, ValueError, r"must have shape \[P, 1, 4\]"),
    ({"kinematics": torch.zeros(0, 1, 4)}, ValueError, r"must have shape \[P, 1, 4\] \(P >= 1"),
    ({"kinematics": torch.zeros(2, 1, 4, dtype=torch.float64)}, TypeError, "must have dtype torch.float32"),
    ({"kinematics": torch.full((2, 1, 4), math.nan)}, ValueError, "holds NaN or infinite values"),
    ({}, ValueError, "the reset pool is empty"),
    ([torch.zeros(2, 1, 4)], TypeError, "a reset pool is a TensorDict"),
]


@pytest.mark.parametrize("pool, error, message", BAD_POOLS)
def test_bad_pools_are_refused_and_change_nothing(pool, error, message):
    good = torch.tensor([[[0.01, 0.0, 0.0, 0.0]]])
    env = CartPoleEnv(num_envs=2, seed=0, reset_pool={"kinematics": good})
    with pytest.raises(error, match=message):
        env.set_reset_pool(pool)
    assert torch.equal(env.reset_pool["kinematics"], good)
    assert torch.equal(env.reset()["observation"], good[:, 0].expand(2, 4))
    with pytest.raises(error, match=message):
        CartPoleEnv(num_envs=2, reset_pool=pool)


def test_pool_sizes_must_agree_and_scratch_fields_are_refused():
    pool, _ = donor_pool("tag_grid", size=3)
    with pytest.raises(ValueError, match="the same number of start states"):
        make("tag_grid", reset_pool={"pos": pool["pos"], "speed": pool["speed"][:2]})
    with pytest.raises(ValueError, match=r"'cell_count' is not one of the env's own start-state fields \(a kernel's"):
        env = make("tag_grid")
        env.set_reset_pool({"cell_count": env.state["cell_count"].clone()})
    with pytest.raises(ValueError, match=r"'runners_left' is not one of .* \(derived from the start state\)"):
        env.set_reset_pool({"runners_left": env.state["runners_left"].clone()})


@pytest.mark.sim
def test_an_env_without_observe_phases_refuses_a_pool():
    import numba

    @numba.njit
    def start(env, agent, level, observation):
        level[env] = 1.0
        observation[env, agent, 0] = level[env]

    class Direct(WarpEnv):
        def _layout(self, p):
            return Layout(None, (1,), Bounded(-1.0, 1.0, (1,)), [Field("level")], reset=(start,), step=(start,))

    env = Direct(num_envs=2)
    with pytest.raises(ValueError, match="declares no observe phases"):
        env.set_reset_pool({"level": torch.ones(3)})


def test_tag_pool_of_hand_made_starts():
    """The docs' example: every runner starts in one corner, the taggers in the other."""
    env = TagEnv(num_envs=4, num_taggers=2, num_runners=3, num_other_agents_observed=2, seed=0)
    n = env.num_agents
    corner = torch.where(torch.arange(n) < 2, 1.0, 9.0).reshape(1, n, 1).expand(8, n, 2).contiguous()
    pos = corner + torch.rand(8, n, 2)  # eight start states
    env.set_reset_pool({"pos": pos})
    env.reset()
    drawn_entries(env, {"pos": pos})


def test_a_fixed_tag_start_joins_every_pool():
    """TagEnv's starting_* arguments: every reset starts from them, beside a pool's other
    fields (also once the pool is replaced or removed); a pool that sets them too is refused."""
    kw = dict(num_envs=4, num_taggers=1, num_runners=2, num_other_agents_observed=2, seed=0)
    x, y = [1.0, 2.0, 3.0], [3.0, 2.0, 1.0]
    speeds = torch.rand(5, 3)
    env = TagEnv(starting_location_x=x, starting_location_y=y, reset_pool={"speed": speeds}, **kw)
    fixed = torch.tensor([x, y]).T.expand(4, 3, 2)
    for pool in ({"speed": speeds}, None):
        env.reset()
        assert torch.equal(env.state["pos"], fixed)
        if pool is not None:
            drawn_entries(env, {"speed": speeds})
        env.set_reset_pool(None)
    assert list(env.reset_pool.keys()) == ["pos"]
    with pytest.raises(ValueError, match="reset pool holds 'pos', which the env's fixed start"):
        env.set_reset_pool({"pos": torch.zeros(2, 3, 2)})
    assert list(env.reset_pool.keys()) == ["pos"]  # unchanged


@pytest.mark.parametrize("starts, error, message", [
    (dict(starting_location_x=[1.0, 2.0, 3.0]), ValueError, "together, or neither"),
    (dict(starting_location_x=[1.0, 2.0], starting_location_y=[1.0, 2.0]), ValueError, "one value per agent"),
    (dict(starting_location_x=[1.0, 2.0, 30.0], starting_location_y=[1.0, 2.0, 3.0]), ValueError,
     r"in \[0, grid_length=20.0\]"),
    (dict(starting_directions=[0.0, float("nan"), 1.0]), ValueError, "NaN or infinite"),
    (dict(starting_directions="north"), TypeError, "sequence of 3 numbers"),
])
def test_bad_fixed_tag_starts_are_refused(starts, error, message):
    with pytest.raises(error, match=message):
        TagEnv(num_envs=2, num_taggers=1, num_runners=2, num_other_agents_observed=2, **starts)
