"""TagGridWorldEnv against WarpDrive's CPU ``TagGridWorld``: states written into ours, the same
actions, one step at a time and whole trajectories, compared on every state field, reward,
done flag and observation entry (the first difference fails, named); rules and refusals."""
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from test_atomics import compile_ptx, needs_nvvm
from torchrl_warp.envs import TagGridWorldEnv
from torchrl_warp.envs.tag_gridworld import reward_table

try:
    from example_envs.tag_gridworld.tag_gridworld import TagGridWorld
except ImportError as err:  # WarpDrive: pip install --no-deps rl-warp-drive gym
    TagGridWorld, WHY = None, f"WarpDrive's example_envs is not importable ({err})"
else:
    WHY = ""
needs_warpdrive = pytest.mark.skipif(TagGridWorld is None, reason=WHY)

#: the parameters both envs take, under WarpDrive's names
SHARED = ("num_taggers", "grid_length", "episode_length", "wall_hit_penalty", "tag_reward_for_tagger",
          "tag_penalty_for_runner", "step_cost_for_tagger", "use_full_observation")
ODD = dict(num_taggers=5, grid_length=3, episode_length=9, wall_hit_penalty=0.37, tag_reward_for_tagger=3.3,
           tag_penalty_for_runner=-1.25, step_cost_for_tagger=0.07)


class Reference:
    """One WarpDrive ``TagGridWorld`` per env of ``env``, with ``env``'s parameters."""

    def __init__(self, env):
        p = env.params
        self.env = env
        self.games = [TagGridWorld(**{k: getattr(p, k) for k in SHARED}) for _ in range(env.num_envs)]
        for game in self.games:  # keep whether the runner was tagged (step() returns only done)
            game.update_state = self._recording(game)

    @staticmethod
    def _recording(game):
        update = game.update_state

        def record(actions_x, actions_y):
            reward, game.last_tag = update(actions_x, actions_y)
            return reward, game.last_tag

        return record

    def load(self, e, x, y, t):
        """Put env ``e`` of the reference at cells ``x, y`` and time step ``t``."""
        game = self.games[e]
        if game.global_state is None:
            game.reset()
        game.timestep = int(t)
        game.global_state["loc_x"][t] = x
        game.global_state["loc_y"][t] = y

    def cells(self, e):
        game = self.games[e]
        return (game.global_state["loc_x"][game.timestep].astype(np.int32),
                game.global_state["loc_y"][game.timestep].astype(np.int32))

    def step(self, e, actions):
        """``(observation [N, D], reward [N], done, terminated, truncated)``, as float32 / bool."""
        game = self.games[e]
        obs, reward, done, _ = game.step({i: int(a) for i, a in enumerate(actions)})
        truncated = game.timestep >= game.episode_length
        return (stack(obs), np.array([reward[i] for i in range(len(actions))], np.float32),
                bool(done["__all__"]), bool(game.last_tag), truncated)

    def reset(self, e):
        return stack(self.games[e].reset())

    def observe(self, e):
        return stack(self.games[e].generate_observation())


def stack(obs):
    return np.stack([obs[i] for i in range(len(obs))]).astype(np.float32)


def assert_same(what, ours, ref):
    """Equal bit for bit (float32 / int / bool), else fail naming the first difference."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != reference {ref.shape}"
    differ = np.argwhere(ours != ref)
    if len(differ):
        i = tuple(differ[0])
        raise AssertionError(f"{what}: first difference at {i}: ours {ours[i]!r}, reference {ref[i]!r} "
                             f"({len(differ)} entries differ)")


def joint(out, key):
    """``[E, N, ...]`` of a per-agent output, taggers then the runner."""
    return torch.cat([out["taggers", key], out["runners", key]], 1).numpy()


def actions_td(env, actions):
    a = torch.as_tensor(actions, dtype=torch.int64)
    return TensorDict({"taggers": {"action": a[:, :-1]}, "runners": {"action": a[:, -1:]}}, batch_size=[env.num_envs])


def random_cells(env, rng):
    """Cells anywhere on the grid (edges included), a few taggers on or next to the runner's cell."""
    E, N, L = env.num_envs, env.num_agents, env.params.grid_length
    x = rng.integers(0, L + 1, (E, N)).astype(np.int32)
    y = rng.integers(0, L + 1, (E, N)).astype(np.int32)
    for e in range(E):
        for tagger in rng.choice(N - 1, size=min(2, N - 1), replace=False):
            x[e, tagger] = np.clip(x[e, -1] + rng.integers(-1, 2), 0, L)
            y[e, tagger] = y[e, -1]
    return x, y


def compare_step(env, ref, actions, out, where):
    """Our outputs of one step and our state against the reference's step with ``actions``, env
    by env (the state of envs that are done only if ``env.step`` left them so: ``step_and_maybe_reset``
    restarted them)."""
    obs, reward = joint(out, "observation"), joint(out, "reward")[..., 0]
    seen = {"tags": 0, "walls": 0}
    for e in range(env.num_envs):
        r_obs, r_reward, r_done, r_term, r_trunc = ref.step(e, actions[e])
        at = f"{where}, env {e}"
        if env.state["step_count"][e] != 0:  # not restarted
            x, y = ref.cells(e)
            assert_same(f"{at}: loc_x", env.state["loc_x"][e].numpy(), x)
            assert_same(f"{at}: loc_y", env.state["loc_y"][e].numpy(), y)
            assert_same(f"{at}: step_count", env.state["step_count"][e].item(), ref.games[e].timestep)
        else:
            assert r_done, f"{at}: restarted, but the reference is not done"
        assert_same(f"{at}: reward", reward[e], r_reward)
        assert_same(f"{at}: done", out["done"][e, 0].item(), r_done)
        assert_same(f"{at}: terminated", out["terminated"][e, 0].item(), r_term)
        assert_same(f"{at}: truncated", out["truncated"][e, 0].item(), r_trunc)
        assert_same(f"{at}: observation", obs[e], r_obs)
        seen["tags"] += r_term
        seen["walls"] += int((ref.games[e].reward_penalty != 0).any())
    return seen


def step_from_states(env, rng, trials):
    """Random states written into ours and the reference, one step with the same actions."""
    ref = Reference(env)
    env.reset()
    seen = {"tags": 0, "walls": 0, "ties": 0}
    T = env.params.episode_length
    for trial in range(trials):
        x, y = random_cells(env, rng)
        t = rng.integers(0, T, env.num_envs).astype(np.int32)
        t[0] = T - 1  # env 0 reaches the time limit
        env.state["loc_x"].copy_(torch.from_numpy(x))
        env.state["loc_y"].copy_(torch.from_numpy(y))
        env.state["step_count"].copy_(torch.from_numpy(t))
        actions = rng.integers(0, 5, (env.num_envs, env.num_agents))
        for e in range(env.num_envs):
            ref.load(e, x[e], y[e], t[e])
        out = env.step(actions_td(env, actions))["next"]
        got = compare_step(env, ref, actions, out, f"trial {trial}")
        seen["tags"] += got["tags"]
        seen["walls"] += got["walls"]
        seen["ties"] += count_ties(env)
    return seen


def count_ties(env):
    """Envs where two taggers on different cells are both nearest to the runner."""
    x, y = env.state["loc_x"].numpy().astype(np.int64), env.state["loc_y"].numpy().astype(np.int64)
    d2 = (x[:, :-1] - x[:, -1:]) ** 2 + (y[:, :-1] - y[:, -1:]) ** 2
    ties = 0
    for e in range(env.num_envs):
        nearest = np.flatnonzero(d2[e] == d2[e].min())
        ties += len({(x[e, i], y[e, i]) for i in nearest}) > 1
    return ties


def trajectories(env, rng, steps):
    """Both envs from their starts through ``steps`` steps of the same random actions, ours with
    ``step_and_maybe_reset`` (a done env starts again, the reference is reset too)."""
    ref = Reference(env)
    root = env.reset()
    random_start = env.params.starting_locations == "random"
    obs0 = joint(root, "observation")
    for e in range(env.num_envs):
        ref.reset(e)
        if random_start:  # our random start cells, written into the reference
            ref.load(e, env.state["loc_x"][e].numpy(), env.state["loc_y"][e].numpy(), 0)
        assert_same(f"start, env {e}: observation", obs0[e], ref.observe(e))
    seen = {"tags": 0, "walls": 0, "episodes": 0}
    for t in range(steps):
        actions = rng.integers(0, 5, (env.num_envs, env.num_agents))
        data, root = env.step_and_maybe_reset(root.update(actions_td(env, actions)))
        got = compare_step(env, ref, actions, data["next"], f"step {t}")
        seen["tags"] += got["tags"]
        seen["walls"] += got["walls"]
        obs = joint(root, "observation")
        for e in np.flatnonzero(data["next", "done"][:, 0].numpy()):
            seen["episodes"] += 1
            expected = ref.reset(e)
            if random_start:
                ref.load(e, env.state["loc_x"][e].numpy(), env.state["loc_y"][e].numpy(), 0)
                expected = ref.observe(e)
            assert_same(f"step {t}, env {e} restarted: observation", obs[e], expected)
            x, y = ref.cells(e)
            assert_same(f"step {t}, env {e} restarted: loc_x", env.state["loc_x"][e].numpy(), x)
            assert_same(f"step {t}, env {e} restarted: loc_y", env.state["loc_y"][e].numpy(), y)
            assert env.state["step_count"][e] == 0
    return seen


# ---- the replay against WarpDrive ----------------------------------------------------------
CONFIGS = {
    "full": dict(),
    "partial": dict(use_full_observation=False),
    "full_odd": dict(ODD),
    "partial_odd": dict(ODD, use_full_observation=False),
    "partial_one_tagger": dict(num_taggers=1, grid_length=2, episode_length=6, use_full_observation=False),
}


@needs_warpdrive
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("seed", [0, 1])
def test_one_step_from_random_states_matches_warpdrive(name, seed):
    env = TagGridWorldEnv(num_envs=8, seed=seed, **CONFIGS[name])
    seen = step_from_states(env, np.random.default_rng(seed), trials=6)
    assert seen["tags"] > 0 and seen["walls"] > 0  # both rules were exercised
    if env.params.num_taggers > 1:
        assert seen["ties"] > 0  # and the nearest tagger's tie-break


@needs_warpdrive
@pytest.mark.parametrize("name", ["full", "partial_odd", "partial_one_tagger"])
@pytest.mark.parametrize("seed", [0, 3])
def test_trajectories_match_warpdrive(name, seed):
    params = dict(CONFIGS[name])
    params.setdefault("grid_length", 4)  # a small grid: tags and restarts within the run
    env = TagGridWorldEnv(num_envs=6, seed=seed, **params)
    seen = trajectories(env, np.random.default_rng(seed), steps=40)
    assert seen["episodes"] > 0 and seen["tags"] > 0 and seen["walls"] > 0


@needs_warpdrive
@pytest.mark.parametrize("full", [True, False])
def test_trajectories_from_random_starts_match_warpdrive(full):
    env = TagGridWorldEnv(num_envs=6, seed=5, num_taggers=4, grid_length=5, episode_length=12,
                          starting_locations="random", use_full_observation=full)
    seen = trajectories(env, np.random.default_rng(7), steps=30)
    assert seen["episodes"] >= 6


@needs_warpdrive
@pytest.mark.slow
@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_long_trajectories_match_warpdrive(full, seed):
    env = TagGridWorldEnv(num_envs=8, seed=seed, num_taggers=30, grid_length=12, episode_length=120,
                          use_full_observation=full, starting_locations="random" if seed % 2 else "center")
    seen = trajectories(env, np.random.default_rng(seed), steps=250)
    assert seen["episodes"] > 8 and seen["tags"] > 0


@needs_warpdrive
@pytest.mark.slow
def test_one_step_with_999_taggers_matches_warpdrive():
    """The benchmark's shape: lanes stride over 1000 agents (several warps per env)."""
    env = TagGridWorldEnv(num_envs=3, seed=2, num_taggers=999, grid_length=40, use_full_observation=False)
    step_from_states(env, np.random.default_rng(2), trials=3)


@needs_warpdrive
@pytest.mark.sim
@pytest.mark.parametrize("full", [True, False])
def test_tiny_trajectory_matches_warpdrive(full, expected_backend):
    """Also in the simulator: the kernels' CUDA code path (atomics, the key slots)."""
    env = TagGridWorldEnv(num_envs=2, seed=0, num_taggers=3, grid_length=2, episode_length=4,
                          use_full_observation=full)
    assert env.backend == expected_backend
    seen = trajectories(env, np.random.default_rng(1), steps=6 if SIM else 30)
    assert seen["walls"] > 0


# ---- rules, edge cases, generic checks ------------------------------------------------------
def test_specs_shapes_and_defaults_are_warpdrives():
    env = TagGridWorldEnv(num_envs=3)
    check_env_specs(env)
    td = env.rollout(3, break_when_any_done=False)
    assert td["next", "taggers", "observation"].shape == (3, 3, 10, 45)
    assert td["next", "runners", "reward"].shape == (3, 3, 1, 1)
    assert env.full_action_spec["taggers", "action"].space.n == 5
    assert ("taggers", "done") not in env.full_done_spec.keys(True)  # no agent leaves early
    if TagGridWorld is not None:
        import inspect

        defaults = {k: v.default for k, v in inspect.signature(TagGridWorld).parameters.items()}
        assert {k: getattr(env.params, k) for k in SHARED} == {k: defaults[k] for k in SHARED}


def test_start_cells():
    env = TagGridWorldEnv(num_envs=2, grid_length=7)
    env.reset()
    assert env.state["loc_x"][:, :-1].eq(3).all() and env.state["loc_y"][:, :-1].eq(3).all()  # int(3.5)
    assert env.state["loc_x"][:, -1].eq(0).all() and env.state["loc_y"][:, -1].eq(0).all()
    env = TagGridWorldEnv(num_envs=400, grid_length=5, starting_locations="random", seed=3)
    env.reset()
    cells = env.state["loc_x"][:, :-1]
    assert set(cells.unique().tolist()) == {1, 2, 3, 4}
    assert env.state["loc_y"][:, -1].eq(0).all()
    first = env.state["loc_x"].clone()
    env.reset()
    assert not env.state["loc_x"].equal(first)  # every episode draws anew
    env.set_seed(3)
    env.reset()
    assert env.state["loc_x"].equal(first)  # ... reproducibly


def test_a_tag_ends_the_episode_and_rewards_every_tagger():
    env = TagGridWorldEnv(num_envs=2, num_taggers=3, grid_length=10, use_full_observation=False, seed=0)
    env.reset()
    env.state["loc_x"].copy_(torch.tensor([[4, 9, 0, 5], [4, 9, 0, 7]], dtype=torch.int32))
    env.state["loc_y"].copy_(torch.tensor([[5, 9, 0, 5], [5, 9, 0, 5]], dtype=torch.int32))
    # tagger 0 moves +x (onto the runner's cell in env 0), tagger 2 -x into the wall, the others stay
    actions = np.array([[1, 0, 2, 0], [1, 0, 2, 0]])
    td, root = env.step_and_maybe_reset(actions_td(env, actions))
    out = td["next"]
    assert out["terminated"][:, 0].tolist() == [True, False] and not out["truncated"].any()
    assert out["taggers", "reward"][0, :, 0].tolist() == [10.0, 10.0, pytest.approx(9.9)]  # tagger 2 hit the wall
    assert out["runners", "reward"][0, 0, 0].item() == -2.0
    assert out["runners", "reward"][1, 0, 0].item() == pytest.approx(0.01)
    # the runner observes its nearest tagger: tagger 0 in env 1 (2 cells away)
    assert out["runners", "observation"][1, 0, 2:4].tolist() == [0.5, 0.5]
    assert env.state["step_count"].tolist() == [0, 1]  # env 0 started again
    assert root["runners", "observation"][0, 0, :4].tolist() == [0.0, 0.0, 0.5, 0.5]
    assert env.tagged.tolist() == [False, False]


def test_truncation_and_time_feature():
    env = TagGridWorldEnv(num_envs=2, num_taggers=2, episode_length=3, use_full_observation=False, seed=0)
    env.reset()

    def stay(td):
        return td.update(env.full_action_spec.zero())

    td = env.rollout(3, policy=stay, break_when_any_done=False)
    assert td["next", "truncated"][:, :, 0].tolist() == [[False, False, True]] * 2
    assert not td["next", "terminated"].any()
    torch.testing.assert_close(td["next", "runners", "observation"][0, :, 0, 5], torch.tensor([1 / 3, 2 / 3, 1.0]))


def test_out_of_range_actions_are_clamped_when_unchecked():
    env = TagGridWorldEnv(num_envs=2, num_taggers=2, grid_length=4, check_actions=False, seed=0)
    env.reset()
    env.state["loc_x"].fill_(2)
    env.state["loc_y"].fill_(2)
    env.step(actions_td(env, np.array([[-7, 9, 4], [5, -1, 0]])))
    assert env.state["loc_x"].tolist() == [[2, 2, 2], [2, 2, 2]]
    assert env.state["loc_y"].tolist() == [[2, 1, 1], [1, 2, 2]]  # below 0: stay; above 4: the last move, -y


def test_checked_actions_are_refused():
    env = TagGridWorldEnv(num_envs=2, num_taggers=2)
    env.reset()
    with pytest.raises(ValueError, match="outside its spec"):
        env.step(actions_td(env, np.array([[0, 5, 0], [0, 0, 0]])))


def test_reward_table_sums_in_float64():
    env = TagGridWorldEnv(num_envs=1)
    table = reward_table(env.params)
    assert table[1, 0, 1].item() == np.float32(0.01 - 0.1)  # the runner against a wall, no tag
    assert table[0, 0, 1].item() == np.float32(-0.01 - 0.1)
    assert table[1, 1, 0].item() == -2.0 and table[0, 1, 1].item() == np.float32(10.0 - 0.1)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_taggers=0), ValueError, r"'num_taggers' must be an int in \[1, 2147483647\], got 0"),
    (dict(grid_length=40000), ValueError, r"'grid_length' must be an int in \[1, 32767\], got 40000"),
    (dict(grid_length=10.0), TypeError, "'grid_length' must be an int"),
    (dict(episode_length=0), ValueError, "'episode_length' must be an int in"),
    (dict(starting_locations="corner"), ValueError, "'starting_locations' must be one of 'center', 'random'"),
    (dict(starting_locations="random", grid_length=1), ValueError, "needs grid_length >= 2"),
    (dict(wall_hit_penalty=float("inf")), ValueError, "'wall_hit_penalty' must be a finite float"),
    (dict(use_full_observation=1), TypeError, "'use_full_observation' must be a bool"),
    (dict(num_runners=2), TypeError, "unknown parameter.*'num_runners'"),
])
def test_invalid_parameters_are_rejected(kwargs, error, match):
    with pytest.raises(error, match=match):
        TagGridWorldEnv(num_envs=1, **kwargs)


def test_min_key_keeps_the_smallest_on_the_cpu():
    from torchrl_warp.cuda.tag_gridworld import NO_KEY, min_key

    keys = np.full((2, 2), NO_KEY, np.int64)
    for key in (7 << 32 | 3, 2 << 32 | 5, 2 << 32 | 4, 9 << 32):
        min_key(keys, 1, 0, np.int64(key))
    assert keys.tolist() == [[NO_KEY, NO_KEY], [2 << 32 | 4, NO_KEY]]


@needs_nvvm
@pytest.mark.parametrize("full", [True, False])
def test_kernels_take_one_min_per_warp_on_the_gpu(full, monkeypatch):
    """The keys' minimum is a warp's shuffles, then ``atom.global.min`` (PTX for an H200)."""
    env = TagGridWorldEnv(num_envs=2, num_taggers=3, use_full_observation=full)
    for kind in ("step", "reset"):
        ptx = compile_ptx(env._kernels[kind], env._args[kind], monkeypatch)
        assert "match.any.sync.b64" in ptx and "shfl.sync.bfly" in ptx and "atom.global.min.s64" in ptx, kind


# ---- the GPU ----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("params", [
    dict(num_taggers=999, grid_length=30, use_full_observation=False),  # the benchmark's shape: 4 lanes' strides
    dict(),                                                            # WarpDrive's defaults: 8 envs per block
    dict(num_taggers=3, grid_length=3, use_full_observation=False),    # 8 envs per warp, one key each
    dict(num_taggers=40, grid_length=8, starting_locations="random", use_full_observation=False),
], ids=["999+1", "defaults", "3+1", "40+1_random"])
def test_cpu_and_cuda_trajectories_are_identical(params):
    """Same seed, same actions: every state field (the scratch keys too) and every output equal
    on the CPU and the GPU, through ``step_and_maybe_reset`` and its restarts, without a host sync."""
    E = 16
    envs = {d: TagGridWorldEnv(num_envs=E, device=d, seed=4, check_actions=False, episode_length=25, **params)
            for d in ("cpu", "cuda")}
    roots = {d: env.reset() for d, env in envs.items()}
    rng = np.random.default_rng(0)
    n = envs["cpu"].num_agents
    done = 0
    for t in range(60):
        actions = rng.integers(0, 5, (E, n))
        data = {}
        for d, env in envs.items():
            td = actions_td(env, actions).to(d)
            strict = d == "cuda" and t >= 2  # after the compiles and graph captures
            if strict:
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            try:
                data[d], roots[d] = env.step_and_maybe_reset(roots[d].update(td))
            finally:
                if strict:
                    torch.cuda.set_sync_debug_mode(0)
        for name, value in envs["cpu"].state.items():
            assert_same(f"step {t}: state {name}", envs["cuda"].state[name].cpu().numpy(), value.numpy())
        for key, value in data["cpu"]["next"].items(True, True):
            assert_same(f"step {t}: next {key}", data["cuda"]["next"][key].cpu().numpy(), value.numpy())
        done += int(data["cpu"]["next", "done"].sum())
    assert done > 0
