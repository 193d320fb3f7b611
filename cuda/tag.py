"""Tag (continuous) kernels: taggers chase runners on a square.

Agents ``0 .. num_taggers-1`` are taggers, the rest runners. A step runs five
phases with a barrier between each: move, detect tags (runners), score tags
(taggers) and retire tagged runners, end-of-step bookkeeping (one thread per env),
observe. A reset runs two: place agents, observe.

Observation of one agent (``6 + 7 * K + 1`` floats, ``K`` = agents observed):

* own state: ``x / L``, ``y / L``, ``speed / max_speed``, ``acceleration / max_speed``,
  ``direction / 2pi``, type (1 tagger, 0 runner);
* for each of the ``K`` nearest other agents still in the game, nearest first
  (or all other agents in index order with ``use_full_observation``): relative
  ``x``, ``y`` / ``(sqrt(2) L)``, relative speed and acceleration / ``max_speed``,
  relative direction / ``2pi``, type, still-in-game; zeros where fewer remain;
* the time step / ``episode_length``.

An agent out of the game sees zeros.

Arithmetic runs in float64 on float32 state (cos/sin too), so that the GPU and the
CPU round to the same float32 values and trajectories agree across backends.
"""
import math

import numba

from torchrl_warp.cuda.rng import randint, uniform

__all__ = ["reset_agent", "move", "detect_tags", "score_tags", "end_of_step", "observe", "OWN_FEATURES", "NEIGHBOR_FEATURES"]

OWN_FEATURES = 6
NEIGHBOR_FEATURES = 7
_TWO_PI = 2.0 * math.pi


@numba.njit
def reset_agent(env, agent, seed, episode, pos, direction, speed, acceleration, in_game, reward, grid_length):
    """Uniform position in the square, direction in {0, pi/2, pi, 3pi/2}, at rest."""
    pos[env, agent, 0] = uniform(seed, env, episode[env], 0, agent, 0) * grid_length
    pos[env, agent, 1] = uniform(seed, env, episode[env], 0, agent, 1) * grid_length
    direction[env, agent] = randint(seed, env, episode[env], 0, agent, 2, 4) * (0.5 * math.pi)
    speed[env, agent] = 0.0
    acceleration[env, agent] = 0.0
    in_game[env, agent] = True
    reward[env, agent] = 0.0


@numba.njit
def _clamp_index(i, n):
    return 0 if i < 0 else (n - 1 if i >= n else i)


@numba.njit
def move(
    env, agent, step_count, action, pos, direction, speed, acceleration, in_game, reward,
    acceleration_actions, turn_actions, num_taggers, grid_length, max_speed,
    skill_level_tagger, skill_level_runner, step_penalty_for_tagger, step_reward_for_runner,
    edge_hit_penalty, end_of_game_reward_for_runner, episode_length,
):
    """Accelerate, turn, move; per-step, edge and end-of-game rewards."""
    if not in_game[env, agent]:
        speed[env, agent] = 0.0
        acceleration[env, agent] = 0.0
        reward[env, agent] = 0.0
        return
    tagger = agent < num_taggers
    a = _clamp_index(action[env, agent, 0], acceleration_actions.shape[0])
    t = _clamp_index(action[env, agent, 1], turn_actions.shape[0])
    f64 = numba.float64
    acc = f64(acceleration[env, agent]) + f64(acceleration_actions[a])
    d = f64(direction[env, agent]) + f64(turn_actions[t])
    if d < 0.0:
        d += _TWO_PI
    elif d >= _TWO_PI:
        d -= _TWO_PI
    top = max_speed * (skill_level_tagger if tagger else skill_level_runner)
    s = f64(speed[env, agent]) + acc
    if s > top:
        s = top
        acc = 0.0
    elif s < 0.0:
        s = 0.0
        acc = 0.0
    x = f64(pos[env, agent, 0]) + s * math.cos(d)
    y = f64(pos[env, agent, 1]) + s * math.sin(d)
    hit = False
    if x < 0.0:
        x, hit = 0.0, True
    elif x > grid_length:
        x, hit = grid_length, True
    if y < 0.0:
        y, hit = 0.0, True
    elif y > grid_length:
        y, hit = grid_length, True
    r = step_penalty_for_tagger if tagger else step_reward_for_runner
    if hit:
        r += edge_hit_penalty
    if not tagger and step_count[env] >= episode_length:
        r += end_of_game_reward_for_runner
    pos[env, agent, 0] = x
    pos[env, agent, 1] = y
    direction[env, agent] = d
    speed[env, agent] = s
    acceleration[env, agent] = acc
    reward[env, agent] = r


@numba.njit
def detect_tags(env, agent, pos, in_game, tagged_by, reward, num_taggers, tag_radius, tag_penalty_for_runner):
    """A runner in the game is tagged by its nearest tagger if closer than ``tag_radius``."""
    tagged_by[env, agent] = -1
    if agent < num_taggers or not in_game[env, agent]:
        return
    best = -1
    best_d2 = 3.0e38
    x = numba.float64(pos[env, agent, 0])
    y = numba.float64(pos[env, agent, 1])
    for t in range(num_taggers):
        dx = numba.float64(pos[env, t, 0]) - x
        dy = numba.float64(pos[env, t, 1]) - y
        d2 = dx * dx + dy * dy
        if d2 < best_d2:
            best_d2 = d2
            best = t
    if best >= 0 and best_d2 < tag_radius * tag_radius:
        tagged_by[env, agent] = best
        reward[env, agent] += tag_penalty_for_runner


@numba.njit
def score_tags(
    env, agent, num_agents, in_game, tagged_by, reward, num_taggers, tag_reward_for_tagger,
    runner_exits_game_after_tagged,
):
    """Taggers count the runners they tagged (no atomics: each reads all runners)."""
    if agent < num_taggers:
        count = 0
        for r in range(num_taggers, num_agents):
            if tagged_by[env, r] == agent:
                count += 1
        reward[env, agent] += count * tag_reward_for_tagger
    elif runner_exits_game_after_tagged and tagged_by[env, agent] >= 0:
        in_game[env, agent] = False


@numba.njit
def end_of_step(env, agent, num_agents, step_count, in_game, done, terminated, truncated, num_taggers, episode_length):
    """One thread per env: terminated when no runner is left, truncated at the time limit."""
    if agent != 0:
        return
    left = 0
    for r in range(num_taggers, num_agents):
        if in_game[env, r]:
            left += 1
    term = left == 0
    trunc = step_count[env] >= episode_length
    terminated[env] = term
    truncated[env] = trunc
    done[env] = term or trunc


@numba.njit
def _write_neighbor(observation, env, agent, base, o, pos, direction, speed, acceleration, in_game,
                    num_taggers, pos_scale, max_speed):
    observation[env, agent, base + 0] = (pos[env, o, 0] - pos[env, agent, 0]) * pos_scale
    observation[env, agent, base + 1] = (pos[env, o, 1] - pos[env, agent, 1]) * pos_scale
    observation[env, agent, base + 2] = (speed[env, o] - speed[env, agent]) / max_speed
    observation[env, agent, base + 3] = (acceleration[env, o] - acceleration[env, agent]) / max_speed
    observation[env, agent, base + 4] = (direction[env, o] - direction[env, agent]) / _TWO_PI
    observation[env, agent, base + 5] = 1.0 if o < num_taggers else 0.0
    observation[env, agent, base + 6] = 1.0 if in_game[env, o] else 0.0


@numba.njit
def _insert_neighbor(neighbor_distance, neighbor_index, env, agent, slots, filled, d2, o):
    """Insert ``(d2, o)`` into the sorted list of ``filled`` entries (dropping the last
    one if full); return the new fill count and the new last entry ``(d2, index)``."""
    j = filled if filled < slots else slots - 1
    while j > 0:
        prev_d2 = neighbor_distance[env, agent, j - 1]
        prev = neighbor_index[env, agent, j - 1]
        if prev_d2 < d2 or (prev_d2 == d2 and prev < o):
            break
        neighbor_distance[env, agent, j] = prev_d2
        neighbor_index[env, agent, j] = prev
        j -= 1
    neighbor_distance[env, agent, j] = d2
    neighbor_index[env, agent, j] = o
    if filled < slots:
        filled += 1
    return filled, neighbor_distance[env, agent, filled - 1], neighbor_index[env, agent, filled - 1]


@numba.njit
def observe(
    env, agent, num_agents, step_count, pos, direction, speed, acceleration, in_game, observation,
    neighbor_distance, neighbor_index, agent_done, agent_terminated, agent_truncated, terminated,
    truncated, num_taggers, grid_length, max_speed, episode_length, use_full_observation,
):
    """Per-agent done flags and the observation (layout in the module docstring)."""
    out = not in_game[env, agent]
    agent_terminated[env, agent] = out or terminated[env]
    agent_truncated[env, agent] = truncated[env]
    agent_done[env, agent] = out or terminated[env] or truncated[env]
    dim = observation.shape[2]
    if out:
        for i in range(dim):
            observation[env, agent, i] = 0.0
        return
    observation[env, agent, 0] = pos[env, agent, 0] / grid_length
    observation[env, agent, 1] = pos[env, agent, 1] / grid_length
    observation[env, agent, 2] = speed[env, agent] / max_speed
    observation[env, agent, 3] = acceleration[env, agent] / max_speed
    observation[env, agent, 4] = direction[env, agent] / _TWO_PI
    observation[env, agent, 5] = 1.0 if agent < num_taggers else 0.0
    observation[env, agent, dim - 1] = step_count[env] / episode_length
    pos_scale = 1.0 / (math.sqrt(2.0) * grid_length)
    slots = (dim - OWN_FEATURES - 1) // NEIGHBOR_FEATURES
    filled = 0
    if use_full_observation:
        for o in range(num_agents):
            if o == agent:
                continue
            base = OWN_FEATURES + NEIGHBOR_FEATURES * filled
            if in_game[env, o]:
                _write_neighbor(observation, env, agent, base, o, pos, direction, speed,
                                acceleration, in_game, num_taggers, pos_scale, max_speed)
            else:
                for i in range(NEIGHBOR_FEATURES):
                    observation[env, agent, base + i] = 0.0
            filled += 1
        return
    # k nearest agents still in the game, in the order (distance^2, index): the result does
    # not depend on the order candidates are visited in (ties: lower index first). The
    # k-th entry and the fill count live in registers; the sorted list in
    # neighbor_distance/neighbor_index (global scratch) is touched only on an insertion.
    x = numba.float64(pos[env, agent, 0])
    y = numba.float64(pos[env, agent, 1])
    worst_d2 = numba.float64(0.0)
    worst = -1
    for o in range(num_agents):
        if o == agent or not in_game[env, o]:
            continue
        dx = numba.float64(pos[env, o, 0]) - x
        dy = numba.float64(pos[env, o, 1]) - y
        d2 = dx * dx + dy * dy
        if filled == slots and (d2 > worst_d2 or (d2 == worst_d2 and o > worst)):
            continue
        filled, worst_d2, worst = _insert_neighbor(neighbor_distance, neighbor_index, env, agent, slots,
                                                   filled, d2, o)
    for s in range(slots):
        base = OWN_FEATURES + NEIGHBOR_FEATURES * s
        if s < filled:
            _write_neighbor(observation, env, agent, base, neighbor_index[env, agent, s], pos,
                            direction, speed, acceleration, in_game, num_taggers, pos_scale, max_speed)
        else:
            for i in range(NEIGHBOR_FEATURES):
                observation[env, agent, base + i] = 0.0
