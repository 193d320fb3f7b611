"""Tag (continuous) kernels: taggers chase runners on a square.

Agents ``0 .. num_taggers-1`` are taggers, the rest runners. Phases (see
``TagEnv._layout``), with a barrier between consecutive ones; a tuple runs back to
back for each agent, without one:

* step (``neighbor_search="grid"``): (``clear_counts``, ``move``), ``detect_tags``
  (runners find their nearest tagger, which counts them), (``score_tags``: taggers score, tagged runners leave
  the game; ``count_cells``), ``sum_rows``, ``start_cells`` (and the runners left),
  (``fill_cells``, ``end_of_step``: one lane per env sets the env's done flags,
  ``agent_flags``: each agent's, ``retire_agent``: zeros for agents out of the game),
  ``observe_nearest``;
* reset: ``clear_counts``, (``reset_agent``, ``count_cells``), then as a step.
* with ``neighbor_search="scan"`` (no grid): (``clear_counts``, ``move``),
  (``detect_tags``, ``count_runner``: the runners that stay in the game count themselves),
  (``score_tags``, ``publish_position``, ``end_of_step``, ``agent_flags``, ``retire_agent``),
  ``observe_scan`` (each agent scans every other);
* with ``use_full_observation`` (no grid): as the scan, without ``publish_position``, and
  ``observe`` lists every other agent.

The done flags are written a phase before the observation, so that the observe phase
(the step's longest) keeps nothing of them in registers.

Counts that many agents add to (tags per tagger, agents per cell, runners left
without the grid) use ``atomic_add`` on integers, zeroed by ``clear_counts``; every
other write is an agent's own entry, or a per-env entry written by agent 0.

The k nearest neighbours are found on a uniform grid of ``G x G`` cells per env
(``cells_per_side``, ~3 agents per cell, chosen by ``TagEnv``), rebuilt every
kernel from the agents still in the game: ``count_cells`` bins each agent and takes
a slot in its cell with ``atomic_add``; ``sum_rows`` and ``start_cells`` turn the
counts into an exclusive scan (``cell_start``, one lane per row of cells, O(G)
each); ``fill_cells`` writes every agent and its position at ``cell_start[cell] +
slot`` (``cell_agent``, ``cell_x``, ``cell_y``: the agents sorted by cell and their
positions); the runners left are
the agents in the game minus the taggers, who never leave it.
``observe_nearest`` runs over that sorted list (so that a warp's lanes search
neighbouring cells); for each agent it searches the 3 x 3 cells around the agent's
own (one loop over their three rows' ranges), then rings of cells further out, and
stops when it holds k candidates whose k-th distance is below what any agent outside
the searched square can have (the distance from the agent to the nearest side of the
square with cells behind it, less margins for rounding), or when it has seen every
agent in the game. Candidates are ranked by ``(distance^2, index)``, so the order in
which slots were taken (which varies on the GPU) does not change the result: it is
exactly the brute-force one. The sorted list of the best k so far lives in a
``scratch_row`` (thread-private memory on the GPU), or for k <= 2 in registers.

Observation of one agent (``6 + 7 * K + 1`` floats, ``K`` = agents observed; WarpDrive's):

* own state: ``x / L``, ``y / L``, ``speed / max_speed``, ``acceleration / max_speed``,
  ``direction / 2pi``, type (1 tagger, 0 runner);
* for each of the ``K`` nearest other agents still in the game, nearest first, ties
  broken by the lower index (or all other agents in index order with
  ``use_full_observation``, those out of the game too: where they stay, at rest,
  heading 0, flagged 0): relative ``x``, ``y`` / ``(sqrt(2) L)``, relative speed
  and acceleration / ``max_speed``, relative direction / ``2pi``, type,
  still-in-game; zeros where fewer remain;
* the time step / ``episode_length``.

With ``egocentric_observation`` (``9 + 9 * K + 1`` floats), positions and velocities are
in the agent's own frame (``ahead``: along its heading, ``left``: 90 degrees
counter-clockwise from it), in units of one step at ``max_speed``, and angles are
cosines and sines (no jump at ``2pi``), so that "turn towards the nearest runner" is
the sign of one feature:

* own state: ``x / L``, ``y / L``, ``speed / max_speed``, ``acceleration / max_speed``,
  ``cos`` and ``sin`` of the heading, the arena's centre ahead and left, type;
* each other agent: its position ahead and left, its distance, its velocity relative
  to the agent's (ahead, left), ``cos`` and ``sin`` of its heading relative to the
  agent's, type, still-in-game; zeros where fewer remain;
* the time step / ``episode_length``.

An agent out of the game sees zeros (with ``use_full_observation``, not egocentric, the
others' types and flags too, as WarpDrive's). "In the game" here is as the observation
sees it: before this step's tags by default (WarpDrive's order: a runner tagged in this
step still observes and is observed), after them with ``observe_after_tags``.

A step is WarpDrive's CPU step (``TagContinuous``) in float32, as it computes it: each
operation rounded to float32 on its own (products through
:func:`~torchrl_warp.rounding.mul_rn`, never fused into a multiply-add on the GPU), the
heading's cos and sin computed in float64 and rounded to float32 (every backend then
rounds alike; numpy's float32 ``cos`` is within a unit in the last place of it), so
that trajectories agree bit for bit across backends (tests/test_gpu.py: 100-step
rollouts within 1e-5). The observation is computed in float64 from the float32 state. The neighbour searches rank by
squared distances in float32 (half the registers and instructions per candidate of
float64, the searches' inner loop), with each product rounded on its own
(:func:`~torchrl_warp.rounding.mul_rn`: the GPU compiler would otherwise fuse
``dx * dx + dy * dy`` into one rounding where the CPU rounds twice), so every backend
and every search ranks the same neighbours, bit for bit.
"""
import math

import numba
import numpy

from torchrl_warp.atomics import atomic_add, atomic_count
from torchrl_warp.rounding import mul_rn
from torchrl_warp.scratch import scratch_row
from torchrl_warp.cuda.rng import randint, uniform

__all__ = ["reset_agent", "move", "detect_tags", "score_tags", "count_runner",
           "end_of_step", "agent_flags", "retire_agent", "clear_counts", "count_cells", "sum_rows", "start_cells", "fill_cells",
           "observe_nearest", "observe", "publish_position", "observe_scan", "cells_per_side", "observation_size",
           "observation_scales", "OWN_FEATURES", "NEIGHBOR_FEATURES", "EGO_OWN_FEATURES", "EGO_NEIGHBOR_FEATURES"]

OWN_FEATURES = 6
NEIGHBOR_FEATURES = 7
#: the same with ``egocentric_observation``
EGO_OWN_FEATURES = 9
EGO_NEIGHBOR_FEATURES = 9
_TWO_PI = 2.0 * math.pi
_INV_TWO_PI = 1.0 / _TWO_PI
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
#: agents per grid cell that ``cells_per_side`` aims at
AGENTS_PER_CELL = 3.0


def observation_size(num_observed: int, egocentric: bool) -> int:
    """Floats in one agent's observation: own features, ``num_observed`` others, the time step.

    >>> observation_size(10, False), observation_size(10, True)
    (77, 100)
    """
    if egocentric:
        return EGO_OWN_FEATURES + EGO_NEIGHBOR_FEATURES * num_observed + 1
    return OWN_FEATURES + NEIGHBOR_FEATURES * num_observed + 1


def cells_per_side(num_agents: int) -> int:
    """``G`` of the ``G x G`` neighbour-search grid: about ``AGENTS_PER_CELL`` agents per cell.

    >>> cells_per_side(1000), cells_per_side(110), cells_per_side(3)
    (18, 6, 1)
    """
    return max(1, round(math.sqrt(num_agents / AGENTS_PER_CELL)))


@numba.njit
def reset_agent(env, agent, seed, episode, pos, direction, speed, acceleration, in_game, tagged_by, reward, grid_length):
    """Uniform position in the square, direction in {0, pi/2, pi, 3pi/2}, at rest, untagged."""
    pos[env, agent, 0] = uniform(seed, env, episode[env], 0, agent, 0) * grid_length
    pos[env, agent, 1] = uniform(seed, env, episode[env], 0, agent, 1) * grid_length
    direction[env, agent] = randint(seed, env, episode[env], 0, agent, 2, 4) * (0.5 * math.pi)
    speed[env, agent] = 0.0
    acceleration[env, agent] = 0.0
    in_game[env, agent] = True
    tagged_by[env, agent] = -1
    reward[env, agent] = 0.0


@numba.njit
def _clamp_index(i, n):
    return 0 if i < 0 else (n - 1 if i >= n else i)


@numba.njit
def move(
    env, agent, action, pos, direction, speed, acceleration, in_game, reward,
    acceleration_actions, turn_actions, num_taggers, grid_length, max_speed,
    skill_level_tagger, skill_level_runner, step_penalty_for_tagger, step_reward_for_runner,
    edge_hit_penalty,
):
    """Accelerate, turn, move, in float32 as WarpDrive's CPU step; per-step and edge rewards.

    The acceleration accumulates and resets to 0 when the clipped speed reaches 0 or the
    top speed; the heading wraps into ``[0, 2pi)`` as float32's remainder by float32's
    ``2pi``; an agent out of the game keeps its place, at rest, heading 0."""
    f32 = numba.float32
    if not in_game[env, agent]:
        direction[env, agent] = 0.0
        speed[env, agent] = 0.0
        acceleration[env, agent] = 0.0
        reward[env, agent] = 0.0
        return
    tagger = agent < num_taggers
    a = _clamp_index(action[env, agent, 0], acceleration_actions.shape[0])
    t = _clamp_index(action[env, agent, 1], turn_actions.shape[0])
    acc = f32(acceleration[env, agent] + acceleration_actions[a])
    d = _wrap_heading(f32(direction[env, agent] + turn_actions[t]))
    top = f32(f32(max_speed) * f32(skill_level_tagger if tagger else skill_level_runner))
    s = f32(speed[env, agent] + acc)
    s = min(top, max(f32(0.0), s))
    if not (s > 0.0 and s < top):
        acc = f32(0.0)
    # cos and sin of the float32 heading, rounded to float32 (from float64: every backend
    # rounds alike); each product rounded on its own (no fused multiply-add on the GPU)
    c = f32(math.cos(numba.float64(d)))
    n = f32(math.sin(numba.float64(d)))
    x = f32(pos[env, agent, 0] + mul_rn(s, c))
    y = f32(pos[env, agent, 1] + mul_rn(s, n))
    length = f32(grid_length)
    hit = not (x >= 0.0 and x <= length and y >= 0.0 and y <= length)
    pos[env, agent, 0] = min(length, max(f32(0.0), x))
    pos[env, agent, 1] = min(length, max(f32(0.0), y))
    direction[env, agent] = d
    speed[env, agent] = s
    acceleration[env, agent] = acc
    r = f32(edge_hit_penalty) if hit else f32(0.0)
    reward[env, agent] = f32(r + f32(step_penalty_for_tagger if tagger else step_reward_for_runner))


#: float32's 2pi (a little above 2pi): headings wrap by it, as WarpDrive's float32 remainder
TWO_PI_F32 = float(numpy.float32(2.0 * math.pi))


@numba.njit
def _wrap_heading(d):
    """float32 ``d`` modulo float32's ``2pi`` with the sign of the divisor, as numpy's float32
    ``%``: the exact remainder of ``|d|`` (repeated subtraction in float64 never rounds:
    every value is a multiple of ``d``'s float32 spacing), negated and plus ``2pi`` (rounded
    to float32) when ``d < 0``; -0 becomes +0."""
    f32 = numba.float32
    two_pi = numba.float64(TWO_PI_F32)
    m = abs(numba.float64(d))
    while m >= two_pi:
        m -= two_pi
    if d < 0.0 and m > 0.0:
        return f32(f32(-m) + f32(two_pi))
    return f32(m)


@numba.njit
def _distance(bx, by, x, y):
    """float32 distance from ``(x, y)`` to ``(bx, by)`` as WarpDrive's CPU computes it: every
    operation rounded to float32 on its own (the products never fused)."""
    dx = bx - x
    dy = by - y
    return numba.float32(math.sqrt(mul_rn(dx, dx) + mul_rn(dy, dy)))


@numba.njit
def detect_tags(env, agent, pos, in_game, tagged_by, tag_count, reward, num_taggers, grid_length, tagging_distance,
                tag_penalty_for_runner):
    """A runner in the game is tagged by its nearest tagger (float32 distance, ties to the
    lower index) if closer than ``tagging_distance * grid_length`` (float32); ``tagged_by``;
    the tagger counts it (``tag_count``, atomically: several runners may be tagged by one tagger)."""
    tagged_by[env, agent] = -1
    if agent < num_taggers or not in_game[env, agent]:
        return
    f32 = numba.float32
    best = -1
    best_d = f32(math.inf)
    x = pos[env, agent, 0]
    y = pos[env, agent, 1]
    for t in range(num_taggers):
        d = _distance(pos[env, t, 0], pos[env, t, 1], x, y)
        if d < best_d:
            best_d = d
            best = t
    if best >= 0 and best_d < f32(f32(tagging_distance) * f32(grid_length)):
        tagged_by[env, agent] = best
        reward[env, agent] = f32(reward[env, agent] + f32(tag_penalty_for_runner))
        atomic_add(tag_count, (env, best), 1)


@numba.njit
def score_tags(env, agent, step_count, in_game, tagged_by, tag_count, reward, num_taggers, tag_reward_for_tagger,
               end_of_game_reward_for_runner, runner_exits_game_after_tagged, episode_length):
    """Taggers score the runners they tagged (one float32 addition per tag); tagged runners
    leave the game if the rules say so; at the last step each runner still in the game
    (after this step's tags) gets the end-of-game reward."""
    f32 = numba.float32
    if agent < num_taggers:
        r = reward[env, agent]
        for _ in range(tag_count[env, agent]):
            r = f32(r + f32(tag_reward_for_tagger))
        reward[env, agent] = r
        return
    if runner_exits_game_after_tagged and tagged_by[env, agent] >= 0:
        in_game[env, agent] = False
    if in_game[env, agent] and step_count[env] >= episode_length:
        reward[env, agent] = f32(reward[env, agent] + f32(end_of_game_reward_for_runner))


@numba.njit
def _seen(env, o, in_game, tagged_by, observe_after_tags):
    """Whether agent ``o`` is in the game in this step's observation: WarpDrive observes
    before the step's tags (a runner tagged this step still shows), or after them."""
    return in_game[env, o] or (not observe_after_tags and tagged_by[env, o] >= 0)


@numba.njit
def count_runner(env, agent, in_game, tagged_by, runners_left, num_taggers, runner_exits_game_after_tagged):
    """A runner in the game that this step's tag does not send out counts itself in
    ``runners_left`` (atomically; zeroed by ``clear_counts``), so that the count is final
    right after :func:`detect_tags`, a phase before the tagged runners leave. For the scan
    and the full observation, which have no grid to count with."""
    leaving = runner_exits_game_after_tagged and tagged_by[env, agent] >= 0
    if agent >= num_taggers and in_game[env, agent] and not leaving:
        atomic_count(runners_left, env)


@numba.njit
def _episode_over(env, step_count, runners_left, episode_length):
    """``(terminated, truncated)`` of the env: no runner left, the time limit reached."""
    return runners_left[env] == 0, step_count[env] >= episode_length


@numba.njit
def end_of_step(env, agent, step_count, runners_left, done, terminated, truncated, episode_length):
    """One lane per env: terminated when no runner is left, truncated at the time limit."""
    if agent != 0:
        return
    term, trunc = _episode_over(env, step_count, runners_left, episode_length)
    terminated[env] = term
    truncated[env] = trunc
    done[env] = term or trunc


@numba.njit
def agent_flags(env, agent, step_count, runners_left, in_game, agent_done, agent_terminated, agent_truncated,
                episode_length):
    """The agent's done flags: terminated once out of the game, else the episode's flags
    (from the final ``runners_left`` and the step count, as :func:`end_of_step`)."""
    term, trunc = _episode_over(env, step_count, runners_left, episode_length)
    out = not in_game[env, agent]
    agent_terminated[env, agent] = out or term
    agent_truncated[env, agent] = trunc
    agent_done[env, agent] = out or term or trunc


@numba.njit
def retire_agent(env, agent, in_game, tagged_by, observation, observe_after_tags):
    """An agent out of the game (in this step's observation, :func:`_seen`) observes zeros
    (the full observation then adds the others' types and flags); those in the game get
    their observation from the search's observe phase."""
    if _seen(env, agent, in_game, tagged_by, observe_after_tags):
        return
    for i in range(observation.shape[2]):
        observation[env, agent, i] = 0.0


# ---- the neighbour-search grid --------------------------------------------------------
@numba.njit
def clear_counts(env, agent, num_agents, tag_count, runners_left, cell_count):
    """Zero what later phases count with ``atomic_add``: each agent's tags, the runners
    left (agent 0), the grid's cell counts (lanes stride over cells; none without a grid)."""
    tag_count[env, agent] = 0
    if agent == 0:
        runners_left[env] = 0
    c = agent  # a while loop: range() with a step known only at run time divides on the GPU
    while c < cell_count.shape[1]:
        cell_count[env, c] = 0
        c += num_agents


@numba.njit
def _cell_coordinate(v, cells_per_unit, g):
    """``floor(v * cells_per_unit)`` clamped to ``[0, g - 1]`` (NaN: 0)."""
    f = numba.float64(v) * cells_per_unit
    if f >= g:
        return g - 1
    if f >= 0.0:
        return min(int(f), g - 1)
    return 0


@numba.njit
def count_cells(env, agent, pos, in_game, tagged_by, cell_count, agent_cell, agent_slot, cells_per_side, cells_per_unit,
                observe_after_tags):
    """Bin an agent in the game (in this step's observation, :func:`_seen`) into its cell and
    take a slot there (``-1``: out of the game)."""
    if not _seen(env, agent, in_game, tagged_by, observe_after_tags):
        agent_cell[env, agent] = -1
        return
    g = cells_per_side
    c = (_cell_coordinate(pos[env, agent, 1], cells_per_unit, g) * g
         + _cell_coordinate(pos[env, agent, 0], cells_per_unit, g))
    agent_cell[env, agent] = c
    agent_slot[env, agent] = atomic_add(cell_count, (env, c), 1)


@numba.njit
def sum_rows(env, agent, num_agents, cell_count, row_count, cells_per_side):
    """Agents in each row of cells (lanes stride over rows)."""
    g = cells_per_side
    row = agent
    while row < g:
        total = 0
        for c in range(row * g, row * g + g):
            total += cell_count[env, c]
        row_count[env, row] = total
        row += num_agents


@numba.njit
def start_cells(env, agent, num_agents, cell_count, row_count, cell_start, runners_left, tag_count, num_taggers,
                cells_per_side, runner_exits_game_after_tagged, observe_after_tags):
    """Exclusive scan of the counts: ``cell_start[c]`` is where cell ``c``'s agents begin in
    ``cell_agent``; ``cell_start[G * G]`` is the number of agents binned, and the runners
    left are that minus the taggers (who never leave the game), minus the runners this
    step's tags send out when they were binned (observed before the tags)."""
    g = cells_per_side
    row = agent
    while row < g:
        offset = 0
        for r in range(row):
            offset += row_count[env, r]
        for c in range(row * g, row * g + g):
            cell_start[env, c] = offset
            offset += cell_count[env, c]
        if row == g - 1:
            cell_start[env, g * g] = offset
            left = offset - num_taggers
            if runner_exits_game_after_tagged and not observe_after_tags:
                for t in range(num_taggers):
                    left -= tag_count[env, t]
            runners_left[env] = left
        row += num_agents


@numba.njit
def fill_cells(env, agent, pos, agent_cell, agent_slot, cell_start, cell_agent, cell_x, cell_y):
    """Write the agent and its position into its cell's range of the sorted list."""
    c = agent_cell[env, agent]
    if c < 0:
        return
    i = cell_start[env, c] + agent_slot[env, agent]
    cell_agent[env, i] = agent
    cell_x[env, i] = pos[env, agent, 0]  # float32, as the distances
    cell_y[env, i] = pos[env, agent, 1]


#: the grid's search stops once the k-th squared distance is below the nearest unsearched
#: side's squared distance times this: float32 rounding (a few units of 2^-24 of each squared
#: distance) cannot then let an agent beyond that side rank ahead
_FLOAT32_SAFETY = 1.0 - 2.0**-18


@numba.njit
def _distance2(bx, by, x, y):
    """Squared distance from ``(x, y)`` to ``(bx, by)``, all float32, the products rounded on
    their own (:func:`~torchrl_warp.rounding.mul_rn`): the same bits on every backend, so
    that every search and backend ranks neighbours alike."""
    dx = bx - x
    dy = by - y
    return mul_rn(dx, dx) + mul_rn(dy, dy)


@numba.njit
def _insert_sorted(dist, index, slots, filled, d2, o):
    """Insert ``(d2, o)`` into the sorted list of ``filled`` entries (dropping the last
    one if full); return the new fill count and the new last entry ``(d2, index)``."""
    grown = filled + 1 if filled < slots else slots
    j = filled if filled < slots else slots - 1
    while j > 0:
        prev_d2 = dist[j - 1]
        prev = index[j - 1]
        if prev_d2 < d2 or (prev_d2 == d2 and prev < o):
            break
        dist[j] = prev_d2
        index[j] = prev
        j -= 1
    dist[j] = d2
    index[j] = o
    return grown, dist[grown - 1], index[grown - 1]


@numba.njit
def _insert_neighbor(dist, index, slots, kept, d2, o):
    """The grid's insertion of ``(d2, o)``; return the new ``kept``: ``(fill count, first d2,
    first index, last d2, last index)``, in registers.

    For k <= 2 the first and last entries are the whole list: ``dist`` and ``index`` (thread-
    private memory, which an insertion would read and write) stay untouched. For k > 2 the
    list is in them (:func:`_insert_sorted`), and the first entry in ``kept`` is not kept up
    to date."""
    filled, first_d2, first, _, _ = kept
    grown = filled + 1 if filled < slots else slots
    if slots <= 2:
        if filled > 0 and (first_d2 < d2 or (first_d2 == d2 and first < o)):
            return grown, first_d2, first, d2, o  # the new second (k = 2 only)
        if filled > 0 and slots == 2:
            return grown, d2, o, first_d2, first  # the new first; the old one is second
        return grown, d2, o, d2, o
    filled, last_d2, last = _insert_sorted(dist, index, slots, filled, d2, o)
    return filled, first_d2, first, last_d2, last


@numba.njit
def _offer(cell_agent, cell_x, cell_y, dist, index, env, agent, i, x, y, slots, kept):
    """Offer the agent at ``i`` of the sorted list to the agent's list; return the new
    ``kept`` (:func:`_insert_neighbor`). (``i`` is made unsigned: Numba then skips the
    negative-index wrap-around on the three loads, a few instructions per candidate.)"""
    u = numba.uint64(i)
    o = cell_agent[env, u]
    if o == agent:
        return kept
    d2 = _distance2(cell_x[env, u], cell_y[env, u], x, y)
    filled, _, _, worst_d2, worst = kept
    if filled == slots and (d2 > worst_d2 or (d2 == worst_d2 and o > worst)):
        return kept
    return _insert_neighbor(dist, index, slots, kept, d2, o)


@numba.njit
def _scan_cells(cell_agent, cell_x, cell_y, dist, index, env, agent, begin, end, x, y, slots, kept):
    """Offer the agents ``cell_agent[env, begin:end]``."""
    for i in range(begin, end):
        kept = _offer(cell_agent, cell_x, cell_y, dist, index, env, agent, i, x, y, slots, kept)
    return kept


@numba.njit
def _scan_block(cell_agent, cell_x, cell_y, cell_start, dist, index, env, agent, x0, x1, y0, y1, g, x, y, slots):
    """Offer the agents of the cells ``x0..x1`` x ``y0..y1`` (at most 3 rows) to an empty
    list, in one loop over their rows' ranges of the sorted list: the lanes of a warp
    then loop about as many times as each other (a loop per row would run, for each
    row, as long as the warp's longest)."""
    b0 = cell_start[env, y0 * g + x0]
    n0 = cell_start[env, y0 * g + x1 + 1] - b0
    b1 = b2 = n1 = n2 = 0
    if y0 + 1 <= y1:
        b1 = cell_start[env, (y0 + 1) * g + x0]
        n1 = cell_start[env, (y0 + 1) * g + x1 + 1] - b1
    if y0 + 2 <= y1:
        b2 = cell_start[env, (y0 + 2) * g + x0]
        n2 = cell_start[env, (y0 + 2) * g + x1 + 1] - b2
    nothing = numba.float32(0.0)
    kept = (0, nothing, -1, nothing, -1)
    for t in range(n0 + n1 + n2):
        if t < n0:
            i = b0 + t
        elif t < n0 + n1:
            i = b1 + (t - n0)
        else:
            i = b2 + (t - n0 - n1)
        kept = _offer(cell_agent, cell_x, cell_y, dist, index, env, agent, i, x, y, slots, kept)
    return kept


@numba.njit
def _find_neighbors(env, agent, x, y, neighbor_distance, neighbor_index, agent_cell, cell_start, cell_agent,
                    cell_x, cell_y, grid_length, cells_per_side, cell_size):
    """The k nearest other agents in the game of ``agent`` (in the game, at ``x, y``;
    ``k = neighbor_index.shape[2]``), ordered by ``(distance^2, index)``, into
    ``neighbor_index`` (``-1`` in slots beyond the agents found).

    The fill count and the first and k-th entries live in registers (for k <= 2 that is
    the whole list), the sorted list in a ``scratch_row`` (thread-private memory on the GPU;
    the rows of ``neighbor_distance`` and ``neighbor_index`` elsewhere), touched only on an
    insertion and only for k > 2. Candidates come
    from the 3 x 3 cells around the agent's cell, then from rings of cells further out;
    the order does not matter to the result.
    """
    slots = neighbor_index.shape[2]
    dist = scratch_row(neighbor_distance, env, agent)
    index = scratch_row(neighbor_index, env, agent)
    g = cells_per_side
    margin = 1e-9 * grid_length  # >> the rounding of binning and of the bounds below
    others = cell_start[env, g * g] - 1  # agents in the game besides this one
    c = agent_cell[env, agent]
    cx = c % g
    cy = c // g
    # the 3 x 3 block of cells around the agent's first (rings 0 and 1), then rings 2, 3...
    r = 1
    x0 = max(cx - r, 0)
    x1 = min(cx + r, g - 1)
    y0 = max(cy - r, 0)
    y1 = min(cy + r, g - 1)
    kept = _scan_block(cell_agent, cell_x, cell_y, cell_start, dist, index, env, agent, x0, x1, y0, y1, g, x, y, slots)
    while True:
        filled, _, _, worst_d2, _ = kept
        if filled == others:  # seen every agent in the game
            break
        if x0 == 0 and y0 == 0 and x1 == g - 1 and y1 == g - 1:  # the grid is exhausted
            break
        # Any agent not seen yet lies beyond a side of the searched square that has cells
        # behind it, at least as far as that side (agents clamped into edge cells from
        # outside the square lie beyond their cell too).
        bound = 4.0 * grid_length * g  # > any side's distance; at least one side remains
        if x0 > 0:
            bound = min(bound, x - x0 * cell_size)
        if x1 < g - 1:
            bound = min(bound, (x1 + 1) * cell_size - x)
        if y0 > 0:
            bound = min(bound, y - y0 * cell_size)
        if y1 < g - 1:
            bound = min(bound, (y1 + 1) * cell_size - y)
        bound -= margin
        if filled == slots and bound > 0.0 and worst_d2 < bound * bound * _FLOAT32_SAFETY:
            break
        r += 1
        x0 = max(cx - r, 0)
        x1 = min(cx + r, g - 1)
        y0 = max(cy - r, 0)
        y1 = min(cy + r, g - 1)
        for row in range(y0, y1 + 1):
            # the ring's cells in this row: the whole row of the ring (one range of the
            # sorted list) at its top and bottom, else its left and right cells
            whole = row == cy - r or row == cy + r
            for side in range(1 if whole else 2):
                if whole:
                    a, b = x0, x1
                elif side == 0:
                    a, b = cx - r, cx - r
                else:
                    a, b = cx + r, cx + r
                if a < 0 or b >= g:
                    continue
                kept = _scan_cells(cell_agent, cell_x, cell_y, dist, index, env, agent,
                                   cell_start[env, row * g + a], cell_start[env, row * g + b + 1], x, y, slots, kept)
    filled, _, first, _, last = kept
    if slots <= 2:
        neighbor_index[env, agent, 0] = first if filled > 0 else -1
        if slots == 2:
            neighbor_index[env, agent, 1] = last if filled == 2 else -1
        return
    for s in range(slots):
        neighbor_index[env, agent, s] = index[s] if s < filled else -1


# ---- the scan: every agent against every other, for small envs ----------------------------
@numba.njit
def publish_position(env, agent, pos, in_game, tagged_by, scan_x, scan_y, observe_after_tags):
    """The agent's position for :func:`observe_scan` (NaN when out of the game, :func:`_seen`:
    a NaN distance never ranks)."""
    if _seen(env, agent, in_game, tagged_by, observe_after_tags):
        scan_x[env, agent] = pos[env, agent, 0]
        scan_y[env, agent] = pos[env, agent, 1]
    else:
        scan_x[env, agent] = math.nan
        scan_y[env, agent] = math.nan


@numba.njit
def _keep_two(d2, j, d0, i0, d1, i1):
    """The two nearest of ``(d0, i0) <= (d1, i1)`` and candidate ``(d2, j)``, without a branch
    (a warp's lanes insert at different candidates). Candidates come in index order, so
    the strict ``<`` keeps the lower index on a tie; a NaN or infinite ``d2`` never ranks."""
    c0 = d2 < d0
    c1 = d2 < d1
    new_d1 = d0 if c0 else (d2 if c1 else d1)
    new_i1 = i0 if c0 else (j if c1 else i1)
    return (d2 if c0 else d0), (j if c0 else i0), new_d1, new_i1


@numba.njit
def _scan_range(xs, ys, x, y, begin, end, d0, i0, d1, i1):
    """Offer agents ``begin..end-1`` (in index order, two per iteration: two independent
    chains of loads and arithmetic) to the two nearest ``(d0, i0), (d1, i1)``; indices int32.
    (An unsigned 64-bit counter: the compiler then steps the addresses instead of computing
    each one anew.)"""
    u = numba.uint64(begin)
    end = numba.uint64(end)
    while u + numba.uint64(1) < end:
        a = _distance2(xs[u], ys[u], x, y)
        b = _distance2(xs[u + numba.uint64(1)], ys[u + numba.uint64(1)], x, y)
        d0, i0, d1, i1 = _keep_two(a, numba.int32(u), d0, i0, d1, i1)
        d0, i0, d1, i1 = _keep_two(b, numba.int32(u + numba.uint64(1)), d0, i0, d1, i1)
        u += numba.uint64(2)
    if u < end:
        d0, i0, d1, i1 = _keep_two(_distance2(xs[u], ys[u], x, y), numba.int32(u), d0, i0, d1, i1)
    return d0, i0, d1, i1


@numba.njit
def _scan_around(xs, ys, x, y, begin, end, agent, d0, i0, d1, i1):
    """:func:`_scan_range` over ``begin..end-1``, which holds ``agent``: the agent itself skipped
    by a test per candidate (every lane of a warp then loops as long as the others)."""
    u = numba.uint64(begin)
    end = numba.uint64(end)
    me = numba.uint64(agent)
    while u < end:
        d2 = _distance2(xs[u], ys[u], x, y)
        if u == me:
            d2 = numba.float32(math.inf)
        d0, i0, d1, i1 = _keep_two(d2, numba.int32(u), d0, i0, d1, i1)
        u += numba.uint64(1)
    return d0, i0, d1, i1


@numba.njit
def _scan_two(env, agent, x, y, scan_x, scan_y, n):
    """The 2 nearest other agents in the game (``-1`` where fewer), in registers.

    The agents of the agent's block of 32 (its warp's, when an env's agents fill whole
    warps) are scanned with a test for the agent itself; those before and after the block
    without one, in loops as long for every lane of the warp (no lane waits idle)."""
    xs = scan_x[env]
    ys = scan_y[env]
    d0 = d1 = numba.float32(math.inf)
    i0 = i1 = numba.int32(-1)
    first = agent & ~31
    last = min(first + 32, n)
    d0, i0, d1, i1 = _scan_range(xs, ys, x, y, 0, first, d0, i0, d1, i1)
    d0, i0, d1, i1 = _scan_around(xs, ys, x, y, first, last, agent, d0, i0, d1, i1)
    d0, i0, d1, i1 = _scan_range(xs, ys, x, y, last, n, d0, i0, d1, i1)
    return i0, i1


@numba.njit
def _scan_k(env, agent, x, y, scan_x, scan_y, n, dist, index, slots):
    """The ``slots`` nearest other agents in the game into the sorted list ``dist, index``
    (:func:`_insert_sorted`, as the grid's for k > 2); return how many were found. Candidates
    come in index order, so one that only ties the last entry never displaces it (strict ``<``)."""
    filled = 0
    worst = numba.float32(math.inf)
    for j in range(n):
        u = numba.uint64(j)
        d2 = _distance2(scan_x[env, u], scan_y[env, u], x, y)
        if d2 < worst and j != agent:
            filled, last_d2, _ = _insert_sorted(dist, index, slots, filled, d2, j)
            if filled == slots:
                worst = last_d2
    return filled


@numba.njit
def observe_scan(
    env, agent, num_agents, step_count, pos, direction, speed, acceleration, in_game, tagged_by, observation,
    neighbor_distance, neighbor_index, scan_x, scan_y, num_taggers, grid_length, observation_scales,
    egocentric_observation, observe_after_tags,
):
    """Find the k nearest of an agent in the game by scanning every agent, and write its
    observation.

    Every lane of a warp reads the same agent at the same time (one broadcast load), and
    for k <= 2 the list lives in registers: with ~100 agents per env this beats the grid.
    """
    if not _seen(env, agent, in_game, tagged_by, observe_after_tags):
        return
    x = scan_x[env, agent]
    y = scan_y[env, agent]
    slots = neighbor_index.shape[2]
    if slots <= 2:  # the nearest is the first of the two nearest
        i0, i1 = _scan_two(env, agent, x, y, scan_x, scan_y, num_agents)
        neighbor_index[env, agent, 0] = i0
        if slots == 2:
            neighbor_index[env, agent, 1] = i1
    else:
        dist = scratch_row(neighbor_distance, env, agent)
        index = scratch_row(neighbor_index, env, agent)
        filled = _scan_k(env, agent, x, y, scan_x, scan_y, num_agents, dist, index, slots)
        for slot in range(slots):
            neighbor_index[env, agent, slot] = index[slot] if slot < filled else -1
    _observe_listed(env, agent, step_count, pos, direction, speed, acceleration, observation, neighbor_index,
                    num_taggers, grid_length, observation_scales, egocentric_observation)


def observation_scales(grid_length: float, max_speed: float, episode_length: int) -> tuple:
    """``(1 / grid_length, 1 / max_speed, 1 / episode_length)``, computed once on the host: the
    observe phases multiply by these (a float64 division is a subroutine on the GPU).

    >>> observation_scales(20.0, 1.0, 500)
    (0.05, 1.0, 0.002)
    """
    return 1.0 / grid_length, 1.0 / max_speed, 1.0 / episode_length


@numba.njit
def _heading(env, agent, direction, egocentric):
    """``cos`` and ``sin`` of the agent's heading, in float64 (zeros when not egocentric:
    only the egocentric observation uses them)."""
    if not egocentric:
        return 0.0, 0.0
    heading = numba.float64(direction[env, agent])
    return math.cos(heading), math.sin(heading)


@numba.njit
def _observe_own(env, agent, step_count, pos, direction, speed, acceleration, observation, num_taggers,
                 grid_length, scales, egocentric, c, s):
    """The agent's own features and the time step (layout in the module docstring);
    ``scales``: :func:`observation_scales`; ``c, s``: :func:`_heading`."""
    length_scale, speed_scale, time_scale = scales
    observation[env, agent, 0] = pos[env, agent, 0] * length_scale
    observation[env, agent, 1] = pos[env, agent, 1] * length_scale
    observation[env, agent, 2] = speed[env, agent] * speed_scale
    observation[env, agent, 3] = acceleration[env, agent] * speed_scale
    tagger = 1.0 if agent < num_taggers else 0.0
    if egocentric:
        to_x = (0.5 * grid_length - numba.float64(pos[env, agent, 0])) * speed_scale
        to_y = (0.5 * grid_length - numba.float64(pos[env, agent, 1])) * speed_scale
        observation[env, agent, 4] = c
        observation[env, agent, 5] = s
        observation[env, agent, 6] = to_x * c + to_y * s
        observation[env, agent, 7] = to_y * c - to_x * s
        observation[env, agent, 8] = tagger
    else:
        observation[env, agent, 4] = direction[env, agent] * _INV_TWO_PI
        observation[env, agent, 5] = tagger
    observation[env, agent, observation.shape[2] - 1] = step_count[env] * time_scale


@numba.njit
def _observe_other(observation, env, agent, slot, o, in_game_flag, pos, direction, speed, acceleration, num_taggers,
                   scales, egocentric, c, s):
    """Agent ``o`` in the agent's ``slot`` of other agents: zeros if ``o < 0``; its features,
    type and ``in_game_flag`` (an agent out of the game shows where it stays, at rest,
    heading 0, as WarpDrive's full observation), or zeros out of the game when egocentric.
    ``scales``: :func:`observation_scales`; ``c, s``: :func:`_heading` of the agent."""
    own, per = (EGO_OWN_FEATURES, EGO_NEIGHBOR_FEATURES) if egocentric else (OWN_FEATURES, NEIGHBOR_FEATURES)
    base = own + per * slot
    if o < 0 or (egocentric and not in_game_flag):
        for i in range(per):
            observation[env, agent, base + i] = 0.0
        return
    tagger = 1.0 if o < num_taggers else 0.0
    length_scale, speed_scale, _ = scales
    if not egocentric:
        pos_scale = length_scale * _INV_SQRT2
        observation[env, agent, base + 0] = (pos[env, o, 0] - pos[env, agent, 0]) * pos_scale
        observation[env, agent, base + 1] = (pos[env, o, 1] - pos[env, agent, 1]) * pos_scale
        observation[env, agent, base + 2] = (speed[env, o] - speed[env, agent]) * speed_scale
        observation[env, agent, base + 3] = (acceleration[env, o] - acceleration[env, agent]) * speed_scale
        observation[env, agent, base + 4] = (direction[env, o] - direction[env, agent]) * _INV_TWO_PI
        observation[env, agent, base + 5] = tagger
        observation[env, agent, base + 6] = 1.0 if in_game_flag else 0.0
        return
    f64 = numba.float64
    dx = (f64(pos[env, o, 0]) - f64(pos[env, agent, 0])) * speed_scale
    dy = (f64(pos[env, o, 1]) - f64(pos[env, agent, 1])) * speed_scale
    ahead = dx * c + dy * s
    left = dy * c - dx * s
    turn = f64(direction[env, o]) - f64(direction[env, agent])
    ct, st = math.cos(turn), math.sin(turn)
    other_speed = f64(speed[env, o]) * speed_scale
    observation[env, agent, base + 0] = ahead
    observation[env, agent, base + 1] = left
    observation[env, agent, base + 2] = math.sqrt(ahead * ahead + left * left)
    observation[env, agent, base + 3] = other_speed * ct - f64(speed[env, agent]) * speed_scale
    observation[env, agent, base + 4] = other_speed * st
    observation[env, agent, base + 5] = ct
    observation[env, agent, base + 6] = st
    observation[env, agent, base + 7] = tagger
    observation[env, agent, base + 8] = 1.0


@numba.njit
def _observe_listed(env, agent, step_count, pos, direction, speed, acceleration, observation,
                    neighbor_index, num_taggers, grid_length, scales, egocentric):
    """The observation of an agent whose k nearest a search wrote to ``neighbor_index[env, agent]``:
    its own features, then each listed agent's (zeros for ``-1``)."""
    c, s = _heading(env, agent, direction, egocentric)
    _observe_own(env, agent, step_count, pos, direction, speed, acceleration, observation, num_taggers, grid_length,
                 scales, egocentric, c, s)
    for slot in range(neighbor_index.shape[2]):
        _observe_other(observation, env, agent, slot, neighbor_index[env, agent, slot], True, pos, direction, speed,
                       acceleration, num_taggers, scales, egocentric, c, s)


@numba.njit
def observe_nearest(
    env, agent, step_count, pos, direction, speed, acceleration, observation, neighbor_distance,
    neighbor_index, agent_cell, cell_start, cell_agent, cell_x, cell_y, num_taggers, grid_length, observation_scales,
    cells_per_side, cell_size, egocentric_observation,
):
    """Find the k nearest of an agent in the game and write its observation.

    Runs over the agents in cell order: ``agent`` here is a position in the grid's sorted
    list (``cell_agent``), not an agent index, so that neighbouring lanes search
    neighbouring cells (the same candidates, similar loop lengths: less divergence, more
    cache hits). Positions past the agents in the game do nothing (``retire_agent``
    covers agents out of the game).
    """
    g = cells_per_side
    if agent >= cell_start[env, g * g]:
        return
    me = cell_agent[env, agent]
    _find_neighbors(env, me, cell_x[env, agent], cell_y[env, agent], neighbor_distance, neighbor_index, agent_cell,
                    cell_start, cell_agent, cell_x, cell_y, grid_length, g, cell_size)
    _observe_listed(env, me, step_count, pos, direction, speed, acceleration, observation, neighbor_index,
                    num_taggers, grid_length, observation_scales, egocentric_observation)


@numba.njit
def observe(
    env, agent, step_count, pos, direction, speed, acceleration, in_game, tagged_by, observation, num_taggers,
    grid_length, observation_scales, egocentric_observation, observe_after_tags,
):
    """The full observation (``use_full_observation``): own features and every other agent
    in index order, those out of the game too (flagged 0). An agent out of the game sees
    zeros (written by :func:`retire_agent`), and, as WarpDrive's, the others' types and
    flags (not when egocentric)."""
    if not _seen(env, agent, in_game, tagged_by, observe_after_tags):
        if egocentric_observation:
            return
        for slot in range(in_game.shape[1] - 1):
            o = slot if slot < agent else slot + 1
            base = OWN_FEATURES + NEIGHBOR_FEATURES * slot
            observation[env, agent, base + 5] = 1.0 if o < num_taggers else 0.0
            observation[env, agent, base + 6] = 1.0 if _seen(env, o, in_game, tagged_by, observe_after_tags) else 0.0
        return
    c, s = _heading(env, agent, direction, egocentric_observation)
    _observe_own(env, agent, step_count, pos, direction, speed, acceleration, observation, num_taggers,
                 grid_length, observation_scales, egocentric_observation, c, s)
    for slot in range(in_game.shape[1] - 1):
        o = slot if slot < agent else slot + 1  # every other agent, in index order
        _observe_other(observation, env, agent, slot, o, _seen(env, o, in_game, tagged_by, observe_after_tags), pos,
                       direction, speed, acceleration, num_taggers, observation_scales, egocentric_observation, c, s)
