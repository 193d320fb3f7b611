"""TagEnv against WarpDrive's own CPU env (``TagContinuous`` of rl-warp-drive 2.7.1).

Each test pairs env ``e`` of one ``TagEnv`` with one WarpDrive env and feeds both the same
action indices. One step at a time: WarpDrive's state is written into ours before every
step. Whole trajectories: only the start, then both run on their own. After each step
every state field, reward, done flag and observation entry of every agent is compared;
the first difference fails, naming the env, the step and the entry.

What may differ, and by how much: WarpDrive's positions come from numpy's float32 ``cos``
and ``sin`` (SIMD code, off the correctly rounded value in about one call in six), ours
from float64 rounded to float32, so a position may be one float32 spacing away (and a
few after a whole trajectory); the observation is float32. Everything else (speed,
heading, acceleration, who is in the game, rewards, done flags, the types and flags in
the observation) must be identical.

WarpDrive chooses its taggers' ids at random; TagEnv numbers the taggers first. Ties
between equally distant agents go to the lower id in both, so the WarpDrive env is
relabelled with its taggers first (``warpdrive_env``). WarpDrive's observation lists
each feature for every other agent in turn (feature-major) and has no own state; ours
(``6 + 7 * K + 1`` floats, neighbour-major) is rearranged to its layout before comparing.
"""
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from conftest import SIM
from torchrl_warp.envs import TagEnv

try:
    from example_envs.tag_continuous.tag_continuous import TagContinuous
    WHY = ""
except ImportError as err:  # WarpDrive is a test dependency, installed without its own dependencies
    TagContinuous = None
    WHY = (f"needs WarpDrive's example envs ({err}): pip install --no-deps rl-warp-drive==2.7.1 "
           "gym==0.26.2 gym-notices==0.0.8")

needs_warpdrive = pytest.mark.skipif(TagContinuous is None, reason=WHY)
# numpy 2 keeps WarpDrive's float32 arithmetic in float32 (NEP 50); numpy 1 rounded differently
pytestmark = [needs_warpdrive, pytest.mark.skipif(int(np.__version__.split(".")[0]) < 2,
                                                  reason="WarpDrive's float32 rounding as under numpy >= 2")]

#: WarpDrive's defaults (``TagContinuous.__init__``), under its names, which TagEnv shares
DEFAULTS = dict(num_taggers=1, num_runners=10, grid_length=10.0, episode_length=100, max_speed=1.0,
                skill_level_runner=1.0, skill_level_tagger=1.0, max_acceleration=1.0, min_acceleration=-1.0,
                max_turn=np.pi / 2, min_turn=-np.pi / 2, num_acceleration_levels=10, num_turn_levels=10,
                edge_hit_penalty=-0.0, use_full_observation=True, num_other_agents_observed=2, tagging_distance=0.01,
                tag_reward_for_tagger=1.0, step_penalty_for_tagger=-0.0, tag_penalty_for_runner=-1.0,
                step_reward_for_runner=0.0, end_of_game_reward_for_runner=1.0, runner_exits_game_after_tagged=True)
#: WarpDrive's training configuration (warp_drive/training/run_configs/tag_continuous.yaml)
YAML = dict(num_taggers=10, num_runners=100, grid_length=20.0, episode_length=500, max_acceleration=0.1,
            min_acceleration=-0.1, max_turn=2.356, min_turn=-2.356, num_acceleration_levels=20, num_turn_levels=20,
            skill_level_runner=1.0, skill_level_tagger=1.0, max_speed=1.0, use_full_observation=False,
            runner_exits_game_after_tagged=True, num_other_agents_observed=10, tag_reward_for_tagger=10.0,
            tag_penalty_for_runner=-10.0, step_penalty_for_tagger=0.0, step_reward_for_runner=0.0,
            edge_hit_penalty=0.0, end_of_game_reward_for_runner=1.0, tagging_distance=0.02)
#: every reward non-zero, values float32 cannot hold exactly, crowded (many tags), a short episode
BUSY = dict(num_taggers=3, num_runners=12, grid_length=7.3, episode_length=30, max_speed=1.5, skill_level_tagger=1.3,
            skill_level_runner=0.7, max_acceleration=0.45, min_acceleration=-0.3, max_turn=1.1, min_turn=-2.9,
            num_acceleration_levels=7, num_turn_levels=9, edge_hit_penalty=-0.37, tagging_distance=0.09,
            tag_reward_for_tagger=0.3, step_penalty_for_tagger=-0.11, tag_penalty_for_runner=-0.7,
            step_reward_for_runner=0.013, end_of_game_reward_for_runner=0.77, num_other_agents_observed=4)


def warpdrive_env(cfg, seed):
    """WarpDrive's CPU env with ``cfg`` (its defaults for the rest), its taggers relabelled as
    agents ``0 .. num_taggers - 1`` (TagEnv's order; the per-agent tables follow), reset."""
    wd = TagContinuous(seed=seed, **cfg)
    n, t = wd.num_agents, wd.num_taggers
    f32 = np.float32
    skill = {1: f32(cfg.get("skill_level_tagger", 1.0)), 0: f32(cfg.get("skill_level_runner", 1.0))}
    step_reward = {1: wd.step_penalty_for_tagger, 0: wd.step_reward_for_runner}
    wd.agent_type = {i: int(i < t) for i in range(n)}
    wd.taggers = {i: True for i in range(t)}
    wd.runners = {i: True for i in range(t, n)}
    wd.runners_at_reset = dict(wd.runners)
    wd.skill_levels = [skill[wd.agent_type[i]] for i in range(n)]
    wd.step_rewards = [step_reward[wd.agent_type[i]] for i in range(n)]
    wd.reset()
    return wd


def load(env, e, wd):
    """Write WarpDrive's current state into env ``e`` of ours."""
    g, t = wd.global_state, wd.timestep
    s = env.state
    s["pos"][e] = torch.from_numpy(np.stack([g["loc_x"][t], g["loc_y"][t]], -1).astype(np.float32))
    for key in ("speed", "direction", "acceleration"):
        s[key][e] = torch.from_numpy(g[key][t].astype(np.float32))
    s["in_game"][e] = torch.from_numpy(wd.still_in_the_game.astype(bool))
    s["step_count"][e] = t


def as_warpdrive_layout(obs, k):
    """Our ``[N, 6 + 7 * k + 1]`` observations in WarpDrive's layout ``[N, 7 * k + 1]``:
    feature ``f`` of the ``j``-th other agent at ``f * k + j``, the time step last."""
    n = obs.shape[0]
    others = obs[:, 6:6 + 7 * k].reshape(n, k, 7).transpose(0, 2, 1).reshape(n, 7 * k)
    return np.concatenate([others, obs[:, -1:]], 1)


def check_step(env, wds, out, live, position_tol, where):
    """Compare env ``e`` of ours with ``wds[e]`` after a step, for each ``e`` in ``live``."""
    p = env.params
    n, t = env.num_agents, p.num_taggers
    k = n - 1 if p.use_full_observation else p.num_other_agents_observed
    reward = torch.cat([out["taggers", "reward"], out["runners", "reward"]], 1)[..., 0].numpy()
    obs = torch.cat([out["taggers", "observation"], out["runners", "observation"]], 1).numpy()
    runner_terminated = out["runners", "terminated"][..., 0].numpy()
    spacing = position_tol / (np.sqrt(2) * p.grid_length)  # a position's tolerance, as observed
    for e in live:
        wd, (w_obs, w_reward, w_done, _) = wds[e], wds[e].last
        at = f"{where}, env {e}, WarpDrive's step {wd.timestep}"
        g, ts = wd.global_state, wd.timestep
        pos = env.state["pos"][e].numpy()
        for i, key in enumerate(("loc_x", "loc_y")):
            np.testing.assert_allclose(pos[:, i], g[key][ts], rtol=0, atol=position_tol, err_msg=f"{key}, {at}")
        for key in ("speed", "direction", "acceleration"):
            np.testing.assert_array_equal(env.state[key][e].numpy(), g[key][ts], err_msg=f"{key}, {at}")
        in_game = wd.still_in_the_game.astype(bool)
        np.testing.assert_array_equal(env.state["in_game"][e].numpy(), in_game, err_msg=f"in_game, {at}")
        np.testing.assert_array_equal(reward[e], np.array([w_reward[i] for i in range(n)], np.float32),
                                      err_msg=f"reward, {at}")
        assert bool(out["done"][e]) == w_done["__all__"], f"done, {at}"
        np.testing.assert_array_equal(runner_terminated[e], ~in_game[t:], err_msg=f"runners' terminated, {at}")
        theirs = np.stack([w_obs[i] for i in range(n)])
        mine = as_warpdrive_layout(obs[e], k)
        features = np.arange(7 * k)
        exact = (features // k) >= 5  # the types and the in-game flags
        np.testing.assert_array_equal(mine[:, :7 * k][:, exact], theirs[:, :7 * k][:, exact],
                                      err_msg=f"types and flags in the observation, {at}")
        # float32 rounding of a difference of normalised values, and of the positions
        np.testing.assert_allclose(mine[:, :7 * k][:, ~exact], theirs[:, :7 * k][:, ~exact], rtol=0,
                                   atol=2.5e-7 + 2 * spacing, err_msg=f"observed features, {at}")
        np.testing.assert_allclose(mine[:, -1], theirs[:, -1], rtol=1e-7, atol=0, err_msg=f"time step, {at}")


def replay(cfg, seeds, steps, from_states, neighbor_search="auto", action_seed=0):
    """Step ``TagEnv`` and one WarpDrive env per seed with the same random action indices;
    ``from_states``: WarpDrive's state written into ours before every step (else only at
    the start). An env whose episode ends is no longer compared. Returns the number of tags."""
    wds = [warpdrive_env(cfg, seed) for seed in seeds]
    env = TagEnv(num_envs=len(seeds), neighbor_search=neighbor_search, **{**DEFAULTS, **cfg})
    env.reset()
    for e, wd in enumerate(wds):
        load(env, e, wd)
    p = env.params
    n, t = env.num_agents, p.num_taggers
    rng = np.random.default_rng(action_seed)
    # float32 spacing at the world's side: one after a step, a few after a whole trajectory
    position_tol = float(np.spacing(np.float32(p.grid_length))) * (1 if from_states else 16)
    live = list(range(len(seeds)))
    tags = 0
    for step in range(steps):
        if from_states:
            for e in live:
                load(env, e, wds[e])
        action = np.stack([rng.integers(0, p.num_acceleration_levels + 1, (len(seeds), n)),
                           rng.integers(0, p.num_turn_levels + 1, (len(seeds), n))], -1)
        a = torch.as_tensor(action)
        out = env.step(TensorDict({"taggers": {"action": a[:, :t]}, "runners": {"action": a[:, t:]}},
                                  batch_size=[len(seeds)]))["next"]
        for e in live:
            wds[e].last = wds[e].step({i: action[e, i] for i in range(n)})
        check_step(env, wds, out, live, position_tol, f"step {step + 1} ({'from states' if from_states else 'trajectory'})")
        tags += int((env.state["tagged_by"][live] >= 0).sum())
        live = [e for e in live if not wds[e].last[2]["__all__"]]
        if not live:
            break
    return tags


# ---- in every run: a sample ---------------------------------------------------------------
@pytest.mark.skipif(SIM, reason="the simulator runs the small case below")
@pytest.mark.parametrize("from_states", [True, False], ids=["from_states", "trajectory"])
def test_warpdrive_defaults_full_observation(from_states):
    """WarpDrive's defaults (the full observation), a whole episode of 100 steps; then a
    crowded world where every reward is non-zero and nothing is a round float32 value."""
    replay({}, seeds=[1, 2], steps=100, from_states=from_states)
    assert replay(dict(BUSY, use_full_observation=True), seeds=[3, 4], steps=30, from_states=from_states) > 0


@pytest.mark.sim
def test_small_nearest_neighbours():
    """The k nearest (k = 2: the scan), a few steps (on the simulator too)."""
    cfg = dict(num_taggers=2, num_runners=4, use_full_observation=False, num_other_agents_observed=2,
               tagging_distance=0.2, episode_length=8)
    replay(cfg, seeds=[3], steps=3 if SIM else 8, from_states=True)
    if not SIM:
        replay(dict(BUSY, num_other_agents_observed=2), seeds=[4, 5], steps=30, from_states=False)


def test_a_fixed_start_is_warpdrives_in_every_episode():
    """``starting_location_x/y`` and ``starting_directions`` given (WarpDrive's fixed start):
    the first reset and the automatic reset after each episode start where WarpDrive's reset
    starts, and a whole episode from there follows WarpDrive's."""
    cfg = dict(BUSY, use_full_observation=True, episode_length=5)
    n = cfg["num_taggers"] + cfg["num_runners"]
    rng = np.random.default_rng(7)
    starts = dict(starting_location_x=rng.uniform(0, cfg["grid_length"], n),
                  starting_location_y=rng.uniform(0, cfg["grid_length"], n),
                  starting_directions=rng.uniform(0, 2 * np.pi, n))
    wd = warpdrive_env({**cfg, **starts}, seed=5)
    g = wd.global_state
    expected = {"pos": np.stack([g["loc_x"][0], g["loc_y"][0]], -1).astype(np.float32),
                "direction": g["direction"][0].astype(np.float32)}
    env = TagEnv(num_envs=3, seed=0, **{**DEFAULTS, **cfg}, **starts)
    td = env.reset()
    for episode in range(3):
        for key, value in expected.items():
            np.testing.assert_array_equal(env.state[key].numpy(), np.broadcast_to(value, (3, *value.shape)),
                                          err_msg=f"{key} at the start of episode {episode}")
        for _ in range(cfg["episode_length"]):
            _, td = env.step_and_maybe_reset(env.rand_action(td))
    replay({**cfg, **starts}, seeds=[5, 6], steps=cfg["episode_length"], from_states=False)


# ---- the full set -------------------------------------------------------------------------
CONFIGS = {
    "defaults": {},
    "defaults_nearest": dict(use_full_observation=False),
    "busy_full": dict(BUSY, use_full_observation=True),
    "busy_nearest": dict(BUSY, use_full_observation=False),
    "busy_runners_stay": dict(BUSY, use_full_observation=False, runner_exits_game_after_tagged=False),
    "busy_full_runners_stay": dict(BUSY, use_full_observation=True, runner_exits_game_after_tagged=False),
    "busy_k1": dict(BUSY, use_full_observation=False, num_other_agents_observed=1),
}


@pytest.mark.slow
@pytest.mark.parametrize("from_states", [True, False], ids=["from_states", "trajectory"])
@pytest.mark.parametrize("name", CONFIGS)
def test_configurations_match_warpdrive(name, from_states):
    cfg = CONFIGS[name]
    for search in (("grid", "scan") if not cfg.get("use_full_observation", True) else ("auto",)):
        tags = replay(cfg, seeds=[11, 12, 13], steps=cfg.get("episode_length", 100), from_states=from_states,
                      neighbor_search=search)
    assert name.startswith("defaults") or tags > 0  # the crowded worlds tag


@pytest.mark.slow
@pytest.mark.parametrize("k, search", [(10, "grid"), (2, "scan"), (2, "grid")])
def test_training_configuration_matches_warpdrive(k, search):
    """tag_continuous.yaml (10 + 100 agents): one step at a time for 100 steps, and a whole
    500-step episode."""
    cfg = dict(YAML, num_other_agents_observed=k)
    replay(cfg, seeds=[274880], steps=100, from_states=True, neighbor_search=search)
    assert replay(cfg, seeds=[274880 + k], steps=500, from_states=False, neighbor_search=search) > 0
