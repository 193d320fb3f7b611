"""Tag's k-nearest search against brute force, on hard placements.

Each test loads positions (agents at rest, tags switched off, so a no-op step keeps
every agent where it is and in the game it is in), steps once, and compares the
observation with the numpy reference and the neighbour lists (``neighbor_index``,
the search's scratch) with a float32 brute force ordered by ``(distance^2, index)``,
once with each search (``neighbor_search="grid"`` and ``"scan"``).
"""
import numpy as np
import pytest
import torch

from conftest import SIM
from reference_tag import reference_observation
from torchrl_warp.envs import TagEnv


SEARCH = {"neighbor_search": "grid"}  # what make_env passes, set by the fixture below


@pytest.fixture(params=["grid", "scan"], autouse=True)
def search(request, monkeypatch):
    """Every test runs with both searches (they must give the same, brute-force result)."""
    monkeypatch.setitem(SEARCH, "neighbor_search", request.param)
    return request.param


def make_env(num_envs, taggers, runners, k, **kw):
    env = TagEnv(num_envs=num_envs, num_taggers=taggers, num_runners=runners,
                 num_other_agents_observed=k, tagging_distance=0.0, seed=0, **{**SEARCH, **kw})
    env.reset()
    return env


def brute_force(pos, in_game, k):
    """``[E][A]`` lists of the k nearest agents in the game, by (distance^2, index), the squared
    distance in float32 with each operation rounded on its own, as the kernels'."""
    pos = pos.astype(np.float32)
    out = []
    for e in range(pos.shape[0]):
        rows = []
        for a in range(pos.shape[1]):
            others = np.array([b for b in range(pos.shape[1]) if b != a and in_game[e, b]], dtype=np.int64)
            if not in_game[e, a] or len(others) == 0:
                rows.append([])
                continue
            d = pos[e, others] - pos[e, a]
            d2 = d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]
            rows.append(others[np.lexsort((others, d2))][:k].tolist())
        out.append(rows)
    return out


def observe(env, pos, in_game=None):
    """Load ``pos`` ([E, N, 2]) and ``in_game``, step in place, check, return the observation."""
    E, N = env.num_envs, env.num_agents
    pos = np.broadcast_to(np.asarray(pos, dtype=np.float32), (E, N, 2)).copy()
    in_game = np.ones((E, N), bool) if in_game is None else np.broadcast_to(in_game, (E, N)).copy()
    s = env.state
    s["pos"].copy_(torch.as_tensor(pos))
    s["in_game"].copy_(torch.as_tensor(in_game))
    for key in ("speed", "acceleration", "step_count"):
        s[key].zero_()
    direction = s["direction"].numpy().copy()
    env.step(env.full_action_spec.zero())
    assert (s["pos"].numpy() == pos).all() and (s["in_game"].numpy() == in_game).all()
    ref = dict(pos=pos, in_game=in_game, speed=np.zeros((E, N), np.float32),
               acceleration=np.zeros((E, N), np.float32), direction=direction,
               step_count=np.ones(E, np.int32))
    check(env, ref)
    return s["observation"].numpy()


def check(env, ref):
    """The grid (if any), the neighbour lists and the observation of ``env`` against ``ref`` (numpy state)."""
    s = env.state
    pos, in_game = ref["pos"], ref["in_game"]
    E, N = in_game.shape
    g = env.layout.constants["cells_per_side"]
    start, agents = s["cell_start"].numpy(), s["cell_agent"].numpy()
    assert (start.shape[1] > 0) == (env.params.neighbor_search == "grid")
    for e in range(E if start.shape[1] else 0):  # the grid: agents in the game, sorted by cell, in their cells
        assert start[e, -1] == in_game[e].sum() and (np.diff(start[e]) >= 0).all()
        listed = agents[e, :start[e, -1]]
        assert sorted(listed.tolist()) == np.flatnonzero(in_game[e]).tolist()
        cells = np.repeat(np.arange(g * g), np.diff(start[e]))
        per_unit = g / env.params.grid_length  # as the kernel computes it
        col = np.clip(np.floor(pos[e, listed, 0].astype(np.float64) * per_unit), 0, g - 1)
        row = np.clip(np.floor(pos[e, listed, 1].astype(np.float64) * per_unit), 0, g - 1)
        np.testing.assert_array_equal(cells, row * g + col)
    k = env.params.num_other_agents_observed
    expected = brute_force(pos, in_game, k)
    got = s["neighbor_index"].numpy()
    for e in range(E):
        for a in range(N):
            if not in_game[e, a]:
                continue
            n = len(expected[e][a])
            assert got[e, a].tolist() == expected[e][a] + [-1] * (k - n), (e, a)
    np.testing.assert_allclose(s["observation"].numpy(), reference_observation(ref, env.params), atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 10])
def test_random_states_with_many_agents(k):
    env = make_env(3, 3, 200, k)
    rng = np.random.default_rng(k)
    L = env.params.grid_length
    in_game = np.ones((3, 203), bool)
    in_game[:, 3:] = rng.random((3, 200)) > 0.2
    observe(env, rng.uniform(0, L, (3, 203, 2)), in_game)


def test_clusters_corners_and_walls():
    env = make_env(4, 3, 150, 4)
    rng = np.random.default_rng(7)
    L = env.params.grid_length
    pos = rng.uniform(0, L, (4, 153, 2))
    pos[0, :100] = 7.3 + rng.uniform(0, 0.05, (100, 2))      # 100 agents in one tiny square
    pos[1] = rng.uniform(0, 0.7, (153, 2))                    # everyone in a corner
    pos[1, 5] = [L, L]                                         # but one, in the opposite corner
    pos[2, :, 0] = rng.choice([0.0, L], 153)                   # everyone on the walls x=0 / x=L
    pos[3, :60, 1] = 0.0                                       # on the wall y=0, then y=L
    pos[3, 60:120, 1] = L
    observe(env, pos)


def test_agents_on_cell_borders():
    """Positions on every multiple of L/G for the grids a few agent counts give."""
    env = make_env(3, 3, 150, 3)
    L = env.params.grid_length
    rng = np.random.default_rng(3)
    pos = np.empty((3, 153, 2))
    for e, g in enumerate((5, 7, 8)):
        lines = np.arange(g + 1) * (L / g)
        pos[e] = rng.choice(lines, (153, 2))
        pos[e, ::3, 0] = rng.uniform(0, L, 51)  # half on lines, half on crossings
    observe(env, pos)


@pytest.mark.parametrize("k", [1, 2, 5])  # k <= 2: the list in registers
def test_exact_distance_ties(k):
    """Agents placed symmetrically: equal float64 distances, lower index first."""
    env = make_env(2, 1, 24, k)
    pos = np.zeros((2, 25, 2))
    c = np.array([10.0, 10.0])
    pos[:, 0] = c
    ring = [(1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, -1), (1, -1), (-1, 1)]
    for i, (dx, dy) in enumerate(ring * 3):
        pos[:, 1 + i] = c + np.array([dx, dy]) * (0.5 * (1 + i // 8))
    pos[1] = pos[1, ::-1]  # the same placement, indices reversed
    obs = observe(env, pos)
    # the observer's 5 nearest: the 4 at distance 0.5 in index order, then the lowest diagonal
    assert env.state["neighbor_index"][0, 0].tolist() == [1, 2, 3, 4, 5][:k]


def test_tie_across_the_border_of_the_searched_cells():
    """The k-th candidate found in the own cell ties with one just across a cell border,
    which has the lower index: the search must look beyond a bound it merely equals, and
    must not trim away a row of cells that the k-th distance just reaches."""
    env = make_env(2, 2, 38, 1)
    assert env.layout.constants["cells_per_side"] == (4 if env.params.neighbor_search == "grid" else 1)  # 5 x 5 cells
    pos = np.tile([19.0, 19.0], (2, 40, 1)) - np.arange(40)[:, None] * 0.01  # far away, distinct
    pos[:, 5] = [7.5, 7.5]    # env 0: the observer, at the centre of cell (1, 1)
    pos[:, 10] = [6.0, 9.5]   # same cell, 2.5 away (1.5, 2 -> 2.5: exact)
    pos[0, 3] = [10.0, 7.5]   # on the border with cell (2, 1), 2.5 away: wins the tie
    pos[1, 5] = [8.5, 7.5]    # env 1: the observer off centre; 10 is 2.5 away again
    pos[1, 10] = [7.0, 9.5]
    pos[1, 3] = [8.5, 10.0]   # on the border with row 2, 2.5 away: the row's reach is 0
    observe(env, pos)
    assert env.state["neighbor_index"][:, 5, 0].tolist() == [3, 3]


def test_most_runners_out_and_fewer_candidates_than_k():
    env = make_env(3, 2, 60, 10)
    rng = np.random.default_rng(11)
    L = env.params.grid_length
    in_game = np.ones((3, 62), bool)
    in_game[0, 2:] = rng.random(60) < 0.05      # a few runners left
    in_game[1, 2:] = False
    in_game[1, [9, 30, 31, 50]] = True          # 6 in the game for k = 10: zero-filled slots
    in_game[2, 2:] = np.arange(60) < 9          # 11 in the game: k = 10 exactly
    obs = observe(env, rng.uniform(0, L, (3, 62, 2)), in_game)
    slot = lambda s: slice(6 + 7 * s, 13 + 7 * s)
    assert (obs[1, 0, slot(4)] != 0).any() and (obs[1, 0, slot(5)] == 0).all()
    assert (obs[2, 0, slot(9)] != 0).any()


@pytest.mark.parametrize("k", [1, 2])
def test_fewer_agents_in_the_game_than_k_plus_one(k):
    """Env 0: one agent in the game (nothing to list); env 1: two for k = 2 (one found, then
    -1); env 2: an exact tie at the k-th place, the candidates in reverse index order."""
    env = make_env(3, 2, 10, k)
    rng = np.random.default_rng(3)
    pos = rng.uniform(0, env.params.grid_length, (3, 12, 2))
    pos[2, [11, 7, 4]] = pos[2, 0] + np.array([[3.0, 4.0], [0.0, -5.0], [-4.0, 3.0]])  # all 5 from agent 0
    in_game = np.zeros((3, 12), bool)
    in_game[0, 5] = True
    in_game[1, [0, 9]] = True
    in_game[2, [0, 4, 7, 11]] = True
    observe(env, pos, in_game)
    assert env.state["neighbor_index"][2, 0].tolist() == [4, 7][:k]


def test_reset_observes_through_the_search():
    env = TagEnv(num_envs=3, num_taggers=5, num_runners=300, num_other_agents_observed=3, seed=9, **SEARCH)
    env.reset()
    s = {k: env.state[k].numpy().copy() for k in ("pos", "in_game", "speed", "acceleration", "direction",
                                                   "step_count")}
    assert s["in_game"].all() and (s["step_count"] == 0).all()
    check(env, s)


@pytest.mark.sim
@pytest.mark.parametrize("k", [3, 6])  # the search starts with the own cell / the 3 x 3 block
def test_tiny_grid_with_ties_and_agents_out(k):
    env = make_env(2, 2, 8, k)
    pos = np.array([[5, 5], [15, 15], [5, 6], [5, 4], [6, 5], [4, 5], [10, 10], [20, 20], [0, 20], [14, 15]])
    in_game = np.ones((2, 10), bool)
    in_game[1, [2, 4, 9]] = False
    observe(env, pos, in_game)


@pytest.mark.skipif(SIM, reason="1000 agents are too many for the simulator")
def test_1000_agents():
    env = make_env(2, 10, 990, 2)
    rng = np.random.default_rng(5)
    in_game = rng.random((2, 1000)) > 0.1
    observe(env, rng.uniform(0, env.params.grid_length, (2, 1000, 2)), in_game)


def test_distances_tie_in_float32_lower_index_first():
    """Two candidates at squared distances that differ in float64 (25 and 25 + 1e-8) but
    round to the same float32: the searches rank in float32, so the lower index wins, on
    every backend (the products are rounded on their own, never fused)."""
    env = make_env(2, 1, 9, 1)
    pos = np.tile([19.0, 19.0], (2, 10, 1)) - np.arange(10)[:, None] * 0.05  # far away, distinct
    pos[:, 0] = [10.0, 10.0]      # the observer
    pos[:, 2] = [15.0, 10.0001]   # 5 and 1e-4 away: 25.00000001 in float64, 25 in float32
    pos[:, 7] = [13.0, 14.0]      # 3 and 4 away: 25 exactly
    pos[1, [2, 7]] = pos[1, [7, 2]]  # env 1: the exact one has the lower index
    observe(env, pos)
    assert env.state["neighbor_index"][:, 0, 0].tolist() == [2, 2]
