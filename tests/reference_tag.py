"""A plain numpy implementation of one Tag step, written from the rules, for cross-checks.

It takes the state arrays of one env batch (as numpy copies of ``TagEnv.state``)
and the actions, and returns the next state, rewards, flags and observations.
Loops are per env and per agent: clarity over speed.
"""
import math

import numpy as np

TWO_PI = 2.0 * math.pi
F32 = np.float32


def action_table(low, high, levels):
    return np.insert(np.linspace(F32(low), F32(high), levels), 0, 0).astype(np.float32)


def reference_step(s, action, p):
    """One step. ``s``: dict of numpy arrays (``pos``, ``direction``, ``speed``,
    ``acceleration``, ``in_game``, ``step_count``); ``action``: ``[E, N, 2]``; ``p``:
    the env's params namespace. Returns a dict with the new state and outputs.

    The rules of WarpDrive's CPU step, in float32 (every operation rounded to float32):
    the observation sees the agents in the game before this step's tags unless
    ``p.observe_after_tags``."""
    s = {k: v.copy() for k, v in s.items()}
    E, N = s["speed"].shape
    T = p.num_taggers
    acc_t = action_table(p.min_acceleration, p.max_acceleration, p.num_acceleration_levels)
    turn_t = action_table(p.min_turn, p.max_turn, p.num_turn_levels)
    two_pi, length = F32(TWO_PI), F32(p.grid_length)
    reward = np.zeros((E, N), np.float32)
    s["step_count"] = s["step_count"] + 1
    seen = s["in_game"].copy()  # in the game when the observation is taken (before the tags)
    for e in range(E):
        t_now = s["step_count"][e]
        for a in range(N):
            if not s["in_game"][e, a]:  # out of the game: stays, at rest, heading 0
                s["direction"][e, a] = s["speed"][e, a] = s["acceleration"][e, a] = 0.0
                continue
            tagger = a < T
            acc = s["acceleration"][e, a] + acc_t[np.clip(action[e, a, 0], 0, len(acc_t) - 1)]
            d = (s["direction"][e, a] + turn_t[np.clip(action[e, a, 1], 0, len(turn_t) - 1)]) % two_pi
            top = F32(p.max_speed) * F32(p.skill_level_tagger if tagger else p.skill_level_runner)
            sp = np.clip(s["speed"][e, a] + acc, F32(0), top)
            if sp <= 0 or sp >= top:
                acc = F32(0)
            x = s["pos"][e, a, 0] + sp * F32(math.cos(d))
            y = s["pos"][e, a, 1] + sp * F32(math.sin(d))
            hit = not (0 <= x <= length and 0 <= y <= length)
            s["pos"][e, a] = np.clip(np.array([x, y], np.float32), F32(0), length)
            s["direction"][e, a], s["speed"][e, a], s["acceleration"][e, a] = d, sp, acc
            r = F32(p.edge_hit_penalty) if hit else F32(0)
            reward[e, a] = r + F32(p.step_penalty_for_tagger if tagger else p.step_reward_for_runner)
        # tags: each runner in the game against its nearest tagger (float32 distances)
        radius = F32(p.tagging_distance) * length
        for r_ in range(T, N):
            if not s["in_game"][e, r_]:
                continue
            delta = s["pos"][e, :T] - s["pos"][e, r_]
            dist = np.sqrt(delta[:, 0] * delta[:, 0] + delta[:, 1] * delta[:, 1])
            nearest = int(np.argmin(dist))
            if dist[nearest] < radius:
                reward[e, r_] += F32(p.tag_penalty_for_runner)
                reward[e, nearest] += F32(p.tag_reward_for_tagger)
                if p.runner_exits_game_after_tagged:
                    s["in_game"][e, r_] = False
        if t_now >= p.episode_length:  # runners still in the game after the tags
            reward[e, T:] += np.where(s["in_game"][e, T:], F32(p.end_of_game_reward_for_runner), F32(0))
    terminated = ~s["in_game"][:, T:].any(-1)
    truncated = s["step_count"] >= p.episode_length
    s.update(reward=reward, terminated=terminated, truncated=truncated)
    s["observation"] = reference_observation(s, p, s["in_game"] if p.observe_after_tags else seen)
    return s


def reference_observation(s, p, seen=None):
    """Observations of the state ``s``; ``seen``: ``[E, N]`` agents in the game for the
    observation (default ``s["in_game"]``)."""
    seen = s["in_game"] if seen is None else seen
    E, N = s["speed"].shape
    T = p.num_taggers
    k = N - 1 if p.use_full_observation else p.num_other_agents_observed
    ego = p.egocentric_observation
    own, per = (9, 9) if ego else (6, 7)
    obs = np.zeros((E, N, own + per * k + 1))
    L, vmax = p.grid_length, p.max_speed
    scale = 1.0 / (math.sqrt(2.0) * L)
    for e in range(E):
        for a in range(N):
            o = obs[e, a]
            if not seen[e, a]:  # zeros; the full observation shows the others' types and flags
                if p.use_full_observation and not ego:
                    for slot, b in enumerate(b for b in range(N) if b != a):
                        o[own + per * slot + 5], o[own + per * slot + 6] = float(b < T), float(seen[e, b])
                continue
            o[0:2] = s["pos"][e, a] / L
            o[2], o[3] = s["speed"][e, a] / vmax, s["acceleration"][e, a] / vmax
            heading = float(s["direction"][e, a])
            # the agent's frame: "ahead" along its heading, "left" 90 degrees counter-clockwise
            forward, leftward = np.array([math.cos(heading), math.sin(heading)]), \
                np.array([-math.sin(heading), math.cos(heading)])
            if ego:
                to_centre = (L / 2 - s["pos"][e, a].astype(np.float64)) / vmax
                o[4], o[5] = forward
                o[6], o[7] = to_centre @ forward, to_centre @ leftward
                o[8] = float(a < T)
            else:
                o[4], o[5] = heading / TWO_PI, float(a < T)
            o[-1] = s["step_count"][e] / p.episode_length
            others = [b for b in range(N) if b != a]
            if not p.use_full_observation:
                others = [b for b in others if seen[e, b]]
                # float32, each operation rounded on its own, as the kernels; ties: lower index first
                pos32 = s["pos"][e].astype(np.float32)
                d2 = [(pos32[b, 0] - pos32[a, 0]) ** 2 + (pos32[b, 1] - pos32[a, 1]) ** 2 for b in others]
                order = np.argsort(np.asarray(d2), kind="stable")[:k]
                others = [others[i] for i in order]
            for slot, b in enumerate(others):
                if ego and not seen[e, b]:  # the full observation: out of the game
                    continue
                base = own + per * slot
                if ego:
                    rel = (s["pos"][e, b].astype(np.float64) - s["pos"][e, a]) / vmax
                    turn = float(s["direction"][e, b]) - heading
                    v_rel = s["speed"][e, b] / vmax * np.array([math.cos(turn), math.sin(turn)]) \
                        - [s["speed"][e, a] / vmax, 0.0]
                    o[base:base + 9] = [rel @ forward, rel @ leftward, np.linalg.norm(rel), *v_rel,
                                        math.cos(turn), math.sin(turn), float(b < T), 1.0]
                    continue
                o[base:base + 2] = (s["pos"][e, b] - s["pos"][e, a]) * scale
                o[base + 2] = (s["speed"][e, b] - s["speed"][e, a]) / vmax
                o[base + 3] = (s["acceleration"][e, b] - s["acceleration"][e, a]) / vmax
                o[base + 4] = (s["direction"][e, b] - s["direction"][e, a]) / TWO_PI
                o[base + 5], o[base + 6] = float(b < T), float(seen[e, b])
    return obs
