"""Tag (gridworld) kernels: taggers chase one runner on the integer grid ``{0..L}^2``.

Agents ``0 .. N-2`` are taggers, agent ``N-1`` the runner (WarpDrive's order). Each
step (see ``TagGridWorldEnv._layout``; a barrier between the two phases):

* ``move``: every agent computes the runner's move from the state before the step
  (its cell, its action), so that no one waits for it. A tagger moves (``loc_x``,
  ``loc_y``, ``wall_hit``) and offers the key ``(squared distance to the runner's new
  cell) << 32 | index`` to its env's minimum (:func:`min_key`: one atomic per warp on
  the GPU). The runner writes its new cell to ``runner_next`` and its ``wall_hit``,
  not yet to ``loc_x``/``loc_y``, which the taggers read in this phase.
* (``commit_runner``, ``score``, ``observe_nearest`` or ``observe_full``,
  ``end_of_step``, ``advance_key``), back to back for each agent: the runner takes its
  new cell; the env's minimum key says whether the runner was tagged (distance 0) and
  which tagger is nearest (the lowest index among the nearest); rewards come from a
  table of the 8 cases (agent kind, tagged, wall hit) computed in float64 on the host;
  observations; agent 0 writes the done flags and clears the key slot the next step
  fills.

The minimum key of a step lives in ``nearest_key[env, slot]``; ``nearest_slot[env]``
holds the slot ``move`` fills (entry 0) and the one the second phase reads (entry 1).
Two slots let the second phase clear the next step's while every agent still reads
this step's, without another barrier; the slots' bookkeeping is scratch state, so
writing ``loc_x``, ``loc_y`` or ``step_count`` between steps cannot upset it.

The reset: ``place`` (WarpDrive's start cells, or random ones; ``Layout.reset``), then
(``Layout.observe``, also after a reset pool's start cells) ``offer_key`` (the taggers'
keys, for the runner's first observation) and the observation phase.

Observation of one agent (WarpDrive's; positions divided by ``L = grid_length``):

* partial (6 floats): own ``x / L``, ``y / L``; the runner's ``x / L``, ``y / L`` for a
  tagger, the nearest tagger's for the runner; own type (0 tagger, 1 runner);
  ``step / episode_length``;
* full (``4 N + 1`` floats): every agent's ``x / L`` (index order), every agent's
  ``y / L``, every agent's type, a one-hot of the agent itself, ``step / episode_length``.

Every division is correctly rounded (``x / L`` in float32, the time in float64), which
rounds to the float32 of WarpDrive's float64 quotients: the observations are equal
bit for bit on every backend.
"""
import numba
import numpy as np
from numba.core.extending import overload

from torchrl_warp.atomics import _simulator_kernel_context
from torchrl_warp.cuda.rng import randint
from torchrl_warp.simulator import simulator_enabled

__all__ = ["place", "offer_key", "move", "commit_runner", "score", "observe_nearest", "observe_full",
           "end_of_step", "advance_key", "min_key", "observation_size", "MOVES", "NO_KEY"]

#: action index -> (dx, dy): stay, +x, -x, +y, -y (WarpDrive's ``step_actions``)
MOVES = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.int32)
#: the empty minimum (no tagger offered a key yet)
NO_KEY = np.int64(0x7FFFFFFFFFFFFFFF)
_LOW32 = np.int64(0xFFFFFFFF)
_SHIFT32 = np.int64(32)


def observation_size(num_agents: int, full: bool) -> int:
    """Floats in one agent's observation.

    >>> observation_size(11, True), observation_size(11, False)
    (45, 6)
    """
    return 4 * num_agents + 1 if full else 6


# ---- the env's minimum key, on every backend ----------------------------------------------
def min_key(keys, env, slot, key):
    """``keys[env, slot] = min(keys[env, slot], key)``, atomically among an env's agents.

    This Python body runs where phases run as Python (the simulator: its locked atomic);
    compiled code gets an overload: on the CPU a plain compare and store (an env's agents
    run one after another), on the GPU a minimum over the warp's lanes of the same env
    (shuffles) and one ``atomic.min`` per env per warp.
    """
    context = _simulator_kernel_context()
    if context is not None:
        context.atomic.min(keys, (env, slot), key)
        return
    if key < keys[env, slot]:
        keys[env, slot] = key


@overload(min_key, target="cpu")
def _min_key_cpu(keys, env, slot, key):
    def impl(keys, env, slot, key):
        if key < keys[env, slot]:
            keys[env, slot] = key

    return impl


def _register_cuda():
    from numba import cuda
    from numba.cuda.extending import overload as cuda_overload

    @cuda_overload(min_key, target="cuda")
    def _min_key_cuda(keys, env, slot, key):
        def impl(keys, env, slot, key):
            mask = cuda.activemask()
            peers = numba.uint32(cuda.match_any_sync(mask, env))  # the calling lanes of this env
            lane = numba.uint32(cuda.laneid)
            best = key
            offset = numba.uint32(16)
            while offset > 0:  # butterfly over the warp; a lane of another env (or none) is skipped
                other = cuda.shfl_xor_sync(mask, best, offset)
                same = (peers >> (lane ^ offset)) & numba.uint32(1)
                best = min(best, other) if same else best
                offset >>= numba.uint32(1)
            low = numba.uint64(peers) & (numba.uint64(0) - numba.uint64(peers))  # the lowest calling lane
            leader = cuda.popc(low - numba.uint64(1))
            group = cuda.shfl_sync(mask, best, leader)
            if lane == leader:
                cuda.atomic.min(keys, (env, slot), group)
            elif key < group:  # the butterfly missed it (callers that are not a prefix of the lanes)
                cuda.atomic.min(keys, (env, slot), key)

        return impl


if not simulator_enabled():
    _register_cuda()


# ---- helpers ------------------------------------------------------------------------------
@numba.njit
def _moved(x, y, a, moves, grid_length):
    """The cell after action ``a`` (clamped to a valid index) from ``(x, y)``, clipped to
    ``[0, L]^2``, and whether the clip changed it (WarpDrive's CPU test: either coordinate)."""
    a = 0 if a < 0 else (4 if a > 4 else a)
    nx = x + moves[a, 0]
    ny = y + moves[a, 1]
    cx = 0 if nx < 0 else (grid_length if nx > grid_length else nx)
    cy = 0 if ny < 0 else (grid_length if ny > grid_length else ny)
    return cx, cy, cx != nx or cy != ny


@numba.njit
def _key(x, y, rx, ry, agent):
    """``(squared distance) << 32 | agent``: ordered by distance, then index."""
    dx = numba.int64(x) - numba.int64(rx)
    dy = numba.int64(y) - numba.int64(ry)
    return ((dx * dx + dy * dy) << _SHIFT32) | numba.int64(agent)


@numba.njit
def _coordinate(v, grid_length):
    """``v / L`` in float32 (correctly rounded)."""
    return numba.float32(v) / numba.float32(grid_length)


@numba.njit
def _time(step, episode_length):
    """``step / episode_length`` in float64, as WarpDrive computes it."""
    return numba.float64(step) / numba.float64(episode_length)


# ---- reset ---------------------------------------------------------------------------------
@numba.njit
def place(env, agent, seed, episode, num_agents, loc_x, loc_y, wall_hit, nearest_key, grid_length, start_cell,
          random_start):
    """The start cells: taggers at ``(start_cell, start_cell)`` (WarpDrive's default: the
    centre) or, with ``random_start``, uniform in ``[1, L-1]^2``; the runner at ``(0, 0)``.
    Agent 0 empties both key slots."""
    if agent == num_agents - 1:
        x = y = 0
    elif random_start:
        x = 1 + randint(seed, env, episode[env], 0, agent, 0, grid_length - 1)
        y = 1 + randint(seed, env, episode[env], 0, agent, 1, grid_length - 1)
    else:
        x = y = start_cell
    loc_x[env, agent] = x
    loc_y[env, agent] = y
    wall_hit[env, agent] = False
    if agent == 0:
        nearest_key[env, 0] = NO_KEY
        nearest_key[env, 1] = NO_KEY


@numba.njit
def offer_key(env, agent, num_agents, loc_x, loc_y, runner_next, nearest_key, nearest_slot):
    """Reset, from the start cells (drawn, or a reset pool's): each tagger offers its key
    (distance to the runner's start cell) to slot 0; the runner's cell goes to ``runner_next``."""
    r = num_agents - 1
    if agent == 0:
        nearest_slot[env, 1] = 0
    if agent == r:
        runner_next[env, 0] = loc_x[env, r]
        runner_next[env, 1] = loc_y[env, r]
    if agent < r:
        min_key(nearest_key, env, 0, _key(loc_x[env, agent], loc_y[env, agent], loc_x[env, r], loc_y[env, r], agent))


# ---- step ----------------------------------------------------------------------------------
@numba.njit
def move(env, agent, num_agents, action, loc_x, loc_y, wall_hit, runner_next, nearest_key, nearest_slot, moves,
         grid_length):
    """Phase 1: taggers move and offer their keys; the runner's move goes to ``runner_next``."""
    r = num_agents - 1
    rx, ry, runner_hit = _moved(loc_x[env, r], loc_y[env, r], action[env, r], moves, grid_length)
    if agent == r:
        runner_next[env, 0] = rx
        runner_next[env, 1] = ry
        wall_hit[env, agent] = runner_hit
        return
    x, y, hit = _moved(loc_x[env, agent], loc_y[env, agent], action[env, agent], moves, grid_length)
    loc_x[env, agent] = x
    loc_y[env, agent] = y
    wall_hit[env, agent] = hit
    slot = nearest_slot[env, 0]
    if agent == 0:
        nearest_slot[env, 1] = slot
    min_key(nearest_key, env, slot, _key(x, y, rx, ry, agent))


@numba.njit
def commit_runner(env, agent, num_agents, loc_x, loc_y, runner_next):
    """The runner takes its new cell (no one reads its ``loc_x``/``loc_y`` in this phase)."""
    if agent == num_agents - 1:
        loc_x[env, agent] = runner_next[env, 0]
        loc_y[env, agent] = runner_next[env, 1]


@numba.njit
def _tagged(env, nearest_key, nearest_slot):
    """Whether a tagger shares the runner's cell (the nearest is at distance 0)."""
    return (nearest_key[env, nearest_slot[env, 1]] >> _SHIFT32) == 0


@numba.njit
def score(env, agent, num_agents, reward, wall_hit, nearest_key, nearest_slot, rewards):
    """The reward: ``rewards[kind, tagged, wall hit]``."""
    kind = 1 if agent == num_agents - 1 else 0
    tagged = 1 if _tagged(env, nearest_key, nearest_slot) else 0
    hit = 1 if wall_hit[env, agent] else 0
    reward[env, agent] = rewards[kind, tagged, hit]


@numba.njit
def observe_nearest(env, agent, num_agents, step_count, loc_x, loc_y, runner_next, nearest_key, nearest_slot,
                    observation, grid_length, episode_length):
    """Partial observation: own cell, the runner's (taggers) or the nearest tagger's (the
    runner), own type, the time."""
    r = num_agents - 1
    if agent == r:
        x = runner_next[env, 0]
        y = runner_next[env, 1]
        o = nearest_key[env, nearest_slot[env, 1]] & _LOW32
        o = r - 1 if o >= r else o  # never index past the taggers
        ox = loc_x[env, o]
        oy = loc_y[env, o]
        kind = numba.float32(1.0)
    else:
        x = loc_x[env, agent]
        y = loc_y[env, agent]
        ox = runner_next[env, 0]
        oy = runner_next[env, 1]
        kind = numba.float32(0.0)
    observation[env, agent, 0] = _coordinate(x, grid_length)
    observation[env, agent, 1] = _coordinate(y, grid_length)
    observation[env, agent, 2] = _coordinate(ox, grid_length)
    observation[env, agent, 3] = _coordinate(oy, grid_length)
    observation[env, agent, 4] = kind
    observation[env, agent, 5] = _time(step_count[env], episode_length)


@numba.njit
def observe_full(env, agent, num_agents, step_count, loc_x, loc_y, runner_next, observation, grid_length,
                 episode_length):
    """Full observation: every agent's ``x``, ``y``, type, a one-hot of the agent, the time."""
    n = num_agents
    r = n - 1
    for j in range(n):
        if j == r:
            x = runner_next[env, 0]
            y = runner_next[env, 1]
        else:
            x = loc_x[env, j]
            y = loc_y[env, j]
        observation[env, agent, j] = _coordinate(x, grid_length)
        observation[env, agent, n + j] = _coordinate(y, grid_length)
        observation[env, agent, 2 * n + j] = 1.0 if j == r else 0.0
        observation[env, agent, 3 * n + j] = 1.0 if j == agent else 0.0
    observation[env, agent, 4 * n] = _time(step_count[env], episode_length)


@numba.njit
def end_of_step(env, agent, step_count, nearest_key, nearest_slot, done, terminated, truncated, episode_length):
    """Agent 0: terminated when the runner is tagged, truncated at ``episode_length``."""
    if agent != 0:
        return
    term = _tagged(env, nearest_key, nearest_slot)
    trunc = step_count[env] >= episode_length
    terminated[env] = term
    truncated[env] = trunc
    done[env] = term or trunc


@numba.njit
def advance_key(env, agent, nearest_key, nearest_slot):
    """Agent 0: empty the slot the next step fills (no one reads it in this phase)."""
    if agent != 0:
        return
    following = 1 - nearest_slot[env, 1]
    nearest_key[env, following] = NO_KEY
    nearest_slot[env, 0] = following
