"""TagEnv: kernels against the numpy reference, rules, observations, edge cases."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from reference_tag import reference_step
from torchrl_warp.envs import TagEnv

# the simulator runs every CUDA thread as a Python thread: keep it tiny there
SMALL = dict(num_taggers=2, num_runners=5, num_other_agents_observed=3) if SIM else dict(
    num_taggers=3, num_runners=20, num_other_agents_observed=4
)
E = 2 if SIM else 6

STATE_KEYS = ("pos", "direction", "speed", "acceleration", "in_game", "step_count")


def numpy_state(env):
    return {k: env.state[k].cpu().numpy().copy() for k in STATE_KEYS}


def load_state(env, s):
    for k in STATE_KEYS:
        env.state[k].copy_(torch.as_tensor(s[k]))


def random_state(env, rng, near_walls=True, crowd=True):
    """Random positions (some on or near the walls), headings, speeds; some runners out."""
    p = env.params
    E, N = env.num_envs, env.num_agents
    L = p.grid_length
    s = {
        "pos": rng.uniform(0, L, (E, N, 2)).astype(np.float32),
        "direction": rng.uniform(0, 2 * math.pi, (E, N)).astype(np.float32),
        "speed": rng.uniform(0, p.max_speed, (E, N)).astype(np.float32),
        "acceleration": rng.uniform(-0.3, 0.3, (E, N)).astype(np.float32),
        "in_game": np.ones((E, N), dtype=bool),
        "step_count": rng.integers(0, p.episode_length, E).astype(np.int32),
    }
    s["in_game"][:, p.num_taggers:] = rng.random((E, N - p.num_taggers)) > 0.3
    if near_walls:
        s["pos"][:, :3, 0] = [0.0, L, L - 0.01]
        s["speed"][:, :3] = p.max_speed
    if crowd:  # several runners next to tagger 0: simultaneous tags by one tagger
        r = p.tagging_distance * L
        for j, runner in enumerate(range(p.num_taggers, min(p.num_taggers + 3, N))):
            s["pos"][:, runner] = s["pos"][:, 0] + np.float32(0.3 * r * (j + 1) / 3)
            s["speed"][:, runner] = 0.0
            s["in_game"][:, runner] = True
        s["speed"][:, 0] = 0.0
    s["step_count"][0] = p.episode_length - 1  # env 0 hits the time limit
    return s


def check_against_reference(env, s, action):
    load_state(env, s)
    ref = reference_step(s, action.numpy(), env.params)
    td = TensorDict({"taggers": {"action": action[:, : env.params.num_taggers]},
                     "runners": {"action": action[:, env.params.num_taggers:]}}, batch_size=[env.num_envs])
    out = env.step(td)["next"]
    for k in ("pos", "direction", "speed", "acceleration"):
        np.testing.assert_allclose(env.state[k].numpy(), ref[k], atol=1e-5, err_msg=k)
    np.testing.assert_array_equal(env.state["in_game"].numpy(), ref["in_game"])
    np.testing.assert_array_equal(env.state["step_count"].numpy(), ref["step_count"])
    T = env.params.num_taggers
    reward = torch.cat([out["taggers", "reward"], out["runners", "reward"]], 1).squeeze(-1)
    np.testing.assert_allclose(reward.numpy(), ref["reward"], atol=1e-5)
    obs = torch.cat([out["taggers", "observation"], out["runners", "observation"]], 1)
    # egocentric positions are in steps, not fractions of the world: a heading that rounds
    # one float32 ulp (~5e-7 rad) apart turns a neighbour 20 steps away by ~1e-5
    p = env.params
    scale = max(1.0, p.grid_length / p.max_speed) if p.egocentric_observation else 1.0
    np.testing.assert_allclose(obs.numpy(), ref["observation"], atol=1e-5 * scale)
    np.testing.assert_array_equal(out["terminated"].squeeze(-1).numpy(), ref["terminated"])
    np.testing.assert_array_equal(out["truncated"].squeeze(-1).numpy(), ref["truncated"])
    # the runners still in the game (from the grid, or counted by the runners with atomics)
    np.testing.assert_array_equal(env.state["runners_left"].numpy(), ref["in_game"][:, T:].sum(-1))
    runner_term = out["runners", "terminated"].squeeze(-1).numpy()
    np.testing.assert_array_equal(runner_term, ~ref["in_game"][:, T:] | ref["terminated"][:, None])
    return ref


@pytest.mark.sim
def test_specs_and_rollout(expected_backend):
    env = TagEnv(num_envs=E, **SMALL)
    assert env.backend == expected_backend
    check_env_specs(env)
    td = env.rollout(4, break_when_any_done=False)
    n = env.num_agents
    assert td["next", "runners", "observation"].shape == (E, 4, SMALL["num_runners"], 6 + 7 * SMALL["num_other_agents_observed"] + 1)
    assert td["next", "taggers", "reward"].shape == (E, 4, SMALL["num_taggers"], 1)
    assert env.state["pos"].shape == (E, n, 2)


@pytest.mark.sim
@pytest.mark.parametrize(
    "params",
    [
        {},
        dict(use_full_observation=True),
        dict(egocentric_observation=True, max_speed=1.5),
        dict(egocentric_observation=True, use_full_observation=True),
        dict(runner_exits_game_after_tagged=False, edge_hit_penalty=-0.5,
             step_penalty_for_tagger=-0.1, step_reward_for_runner=0.05, skill_level_runner=0.7),
        dict(num_other_agents_observed=2, neighbor_search="scan"),  # the two nearest in registers
        dict(num_other_agents_observed=1, egocentric_observation=True, neighbor_search="scan"),
        dict(neighbor_search="scan"),  # k > 2: the scan's sorted list
        dict(neighbor_search="scan", runner_exits_game_after_tagged=False),
    ],
    ids=["default", "full_observation", "egocentric", "egocentric_full", "penalties", "scan_k2", "scan_k1_ego",
         "scan_k3", "scan_runners_stay"],
)
def test_step_matches_numpy_reference(params):
    env = TagEnv(num_envs=E, seed=1, **{**SMALL, **params})
    env.reset()
    rng = np.random.default_rng(0)
    for trial in range(1 if SIM else 4):
        s = random_state(env, rng)
        action = env.full_action_spec.rand()
        action = torch.cat([action["taggers", "action"], action["runners", "action"]], 1)
        ref = check_against_reference(env, s, action)
        assert ref["reward"][:, 0].max() >= 2.5 * env.params.tag_reward_for_tagger  # the crowd was tagged


def test_step_matches_reference_with_1000_agents():
    """Lanes stride over agents: 1000 agents per env is more than a CUDA block's threads."""
    env = TagEnv(num_envs=2, num_taggers=10, num_runners=990, seed=3)
    env.reset()
    rng = np.random.default_rng(1)
    action = torch.as_tensor(rng.integers(0, 21, (2, 1000, 2)))
    check_against_reference(env, random_state(env, rng), action)


@pytest.mark.sim
def test_out_of_range_actions_are_clamped_when_unchecked():
    env = TagEnv(num_envs=E, seed=2, check_actions=False, **SMALL)
    env.reset()
    rng = np.random.default_rng(5)
    action = torch.as_tensor(rng.integers(-50, 50, (E, env.num_agents, 2)))
    check_against_reference(env, random_state(env, rng), action)  # the reference clips too


def _place(env, positions, in_game=None):
    s = numpy_state(env)
    s["pos"][:] = np.asarray(positions, dtype=np.float32)
    s["speed"][:] = 0.0
    s["acceleration"][:] = 0.0
    s["step_count"][:] = 0
    s["in_game"][:] = True if in_game is None else in_game
    load_state(env, s)


def _noop(env):
    return env.full_action_spec.zero()


def noop_policy(env):
    def policy(tensordict):
        return tensordict.update(_noop(env))

    return policy


@pytest.mark.sim
def test_one_tagger_tags_three_runners_at_once():
    env = TagEnv(num_envs=1, num_taggers=2, num_runners=4, num_other_agents_observed=2, seed=0)
    env.reset()
    _place(env, [[5, 5], [15, 15], [5.1, 5], [5, 5.2], [4.9, 4.9], [10, 10]])
    out = env.step(_noop(env))["next"]
    assert out["taggers", "reward"].flatten().tolist() == [30.0, 0.0]
    assert out["runners", "reward"].flatten().tolist() == [-10.0, -10.0, -10.0, 0.0]
    assert out["runners", "terminated"].flatten().tolist() == [True, True, True, False]
    assert out["runners", "done"].flatten().tolist() == [True, True, True, False]
    assert not out["done"].item()
    # observed before the tags (WarpDrive's rule): the tagged runners still observe and are seen
    obs = out["runners", "observation"][0]
    assert (obs[:3].abs().sum(-1) > 0).all() and (obs[:3, 5] == 0).all()  # own type: runner
    assert out["taggers", "observation"][0, 0, 6 + 6] == 1  # tagger 0's nearest, in the game
    assert env.runners_in_game.tolist() == [1]
    # a runner out of the game no longer moves, observes zeros and can't be tagged again
    out = env.step(_noop(env))["next"]
    assert out["taggers", "reward"].flatten().tolist() == [0.0, 0.0]
    assert out["runners", "observation"][0, :3].abs().sum() == 0


@pytest.mark.sim
def test_observe_after_tags_shows_the_tagged_runners_out_of_the_game():
    """``observe_after_tags=True``: this step's tags are in this step's observation."""
    env = TagEnv(num_envs=1, num_taggers=2, num_runners=4, num_other_agents_observed=2, seed=0,
                 observe_after_tags=True)
    env.reset()
    _place(env, [[5, 5], [15, 15], [5.1, 5], [5, 5.2], [4.9, 4.9], [10, 10]])
    out = env.step(_noop(env))["next"]
    assert out["runners", "terminated"].flatten().tolist() == [True, True, True, False]
    assert out["runners", "observation"][0, :3].abs().sum() == 0  # out of the game: zeros
    # tagger 0's nearest is now tagger 1 or runner 3 (the tagged are gone)
    assert out["taggers", "observation"][0, 0, 6 + 5:6 + 7].tolist() in ([1.0, 1.0], [0.0, 1.0])
    np.testing.assert_allclose(out["taggers", "observation"][0, 0, 6:8].numpy(), [5 / (20 * math.sqrt(2))] * 2,
                               rtol=1e-6)


@pytest.mark.sim
def test_warpdrive_rules_at_the_speed_bounds_and_out_of_the_game():
    """The acceleration resets when the speed reaches 0 or the top speed (inclusive); an
    agent out of the game gets heading 0 and keeps its place; a runner tagged at the last
    step gets no end-of-game reward; the full observation shows an agent out of the game."""
    env = TagEnv(num_envs=1, num_taggers=1, num_runners=3, use_full_observation=True, episode_length=5,
                 max_acceleration=0.5, min_acceleration=-0.5, num_acceleration_levels=3, seed=0)  # -0.5, 0, 0.5
    env.reset()
    _place(env, [[5, 5], [6.1, 5], [15, 15], [12, 3]], in_game=[True, True, True, False])
    s = env.state
    s["speed"][0, :3] = torch.tensor([0.5, 0.5, 0.25])
    s["direction"][0] = torch.tensor([0.0, 0.0, 0.0, 1.0])  # all along +x
    s["step_count"][0] = 4
    action = _noop(env)
    action["taggers", "action"][0, 0, 0] = 3   # +0.5: speed 1.0 = the top speed exactly
    action["runners", "action"][0, 0, 0] = 1   # -0.5: speed 0 exactly
    action["runners", "action"][0, 1, 0] = 3   # +0.5: speed 0.75
    out = env.step(action)["next"]
    assert s["speed"][0].tolist() == [1.0, 0.0, 0.75, 0.0]
    assert s["acceleration"][0].tolist() == [0.0, 0.0, 0.5, 0.0]  # reset at both bounds, kept between
    assert s["direction"][0, 3] == 0 and s["pos"][0, 3].tolist() == [12.0, 3.0]
    # the tagger moves to (6, 5) and tags runner 1 at the last step: no end-of-game reward for it
    assert out["runners", "reward"][0, :, 0].tolist() == [-10.0, 1.0, 0.0]
    # agent 3 (out of the game) in runner 2's full observation: its relative position, flag 0
    seen = out["runners", "observation"][0, 1]
    slot = 6 + 7 * 2  # runner 2's others: agents 0, 1, 3
    np.testing.assert_allclose(seen[slot:slot + 2].numpy(), np.array([-3.75, -12.0]) / (20 * math.sqrt(2)), rtol=1e-6)
    assert seen[slot + 5:slot + 7].tolist() == [0.0, 0.0]
    # agent 3's own full observation: zeros but the others' types and flags (all in the game before the tags)
    blind = out["runners", "observation"][0, 2]
    assert blind[[6 + 5, 6 + 6, 13 + 5, 13 + 6, 20 + 5, 20 + 6]].tolist() == [1.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert blind.abs().sum() == 4.0


@pytest.mark.sim
def test_episode_terminates_when_no_runner_is_left_and_resets():
    env = TagEnv(num_envs=2, num_taggers=1, num_runners=2, num_other_agents_observed=1, seed=0)
    env.reset()
    s = numpy_state(env)
    s["pos"][0] = [[5, 5], [5.1, 5], [5, 5.1]]  # env 0: both runners caught
    s["pos"][1] = [[5, 5], [15, 15], [18, 18]]
    s["speed"][:] = 0
    load_state(env, s)
    td, next_td = env.step_and_maybe_reset(_noop(env))
    assert td["next", "terminated"].flatten().tolist() == [True, False]
    assert td["next", "taggers", "terminated"].flatten().tolist() == [True, False]
    # env 0 was reset in place: runners back in the game, counters restarted
    assert next_td["done"].flatten().tolist() == [False, False]
    assert env.state["in_game"][0].all()
    assert env.state["step_count"].tolist() == [0, 1]


@pytest.mark.sim
def test_truncation_and_end_of_game_reward():
    env = TagEnv(num_envs=1, num_taggers=1, num_runners=2, num_other_agents_observed=1,
                 episode_length=3, seed=0)
    env.reset()
    _place(env, [[2, 2], [10, 10], [18, 18]])
    td = env.rollout(3, policy=noop_policy(env), break_when_any_done=False)
    trunc = td["next", "truncated"].flatten().tolist()
    assert trunc == [False, False, True]
    assert td["next", "runners", "reward"][0, :, :, 0].tolist() == [[0, 0], [0, 0], [1, 1]]
    assert td["next", "runners", "truncated"][0, -1].all()
    time_feature = td["next", "runners", "observation"][0, :, 0, -1]
    torch.testing.assert_close(time_feature, torch.tensor([1 / 3, 2 / 3, 1.0]))


@pytest.mark.sim
def test_k_nearest_are_sorted_and_padded():
    env = TagEnv(num_envs=1, num_taggers=1, num_runners=3, num_other_agents_observed=3, seed=0)
    env.reset()
    out_of_game = [True, True, False, True]
    _place(env, [[10, 10], [13, 10], [11, 10], [10, 18]], in_game=out_of_game)
    env.step(_noop(env))
    obs = env.state["observation"][0, 0]
    L = math.sqrt(2) * 20
    # nearest first: agent 1 (3 away), then agent 3 (8 away); agent 2 is out: zero slot
    torch.testing.assert_close(obs[6:8], torch.tensor([3 / L, 0.0]))
    torch.testing.assert_close(obs[13:15], torch.tensor([0.0, 8 / L]))
    assert obs[20:27].abs().sum() == 0
    assert obs[6 + 5] == 0 and obs[6 + 6] == 1  # type runner, in game


def test_start_distribution():
    env = TagEnv(num_envs=200, seed=4)
    env.reset()
    pos, d = env.state["pos"], env.state["direction"]
    assert 0 <= pos.min() and pos.max() <= 20
    assert abs(pos.mean().item() - 10) < 0.2
    quarter = torch.round(d / (math.pi / 2))
    torch.testing.assert_close(d, quarter * math.pi / 2)
    assert set(quarter.unique().tolist()) == {0.0, 1.0, 2.0, 3.0}
    assert (env.state["speed"] == 0).all() and (env.state["acceleration"] == 0).all()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(num_runners=0), ValueError, r"'num_runners' must be an int in \[1, 2147483647\], got 0"),
        (dict(grid_length=-1.0), ValueError, "'grid_length' must be a float > 0, got -1.0"),
        (dict(grid_length=float("nan")), ValueError, "'grid_length' must be a finite float, got nan"),
        (dict(episode_length=2**40), ValueError, "'episode_length' must be an int in"),
        (dict(num_acceleration_levels=10**8), ValueError, r"'num_acceleration_levels' must be an int in \[1, 65536\]"),
        (dict(num_taggers=2, num_runners=3, num_other_agents_observed=5), ValueError, "must be < the number of agents"),
        (dict(edge_hit_penalty=0.5), ValueError, "'edge_hit_penalty' must be a float <= 0, got 0.5"),
        (dict(num_runner=3), TypeError, "unknown parameter.*'num_runner'"),
        (dict(num_runners=3.5), TypeError, "'num_runners' must be an int"),
        (dict(use_full_observation=1), TypeError, "'use_full_observation' must be a bool"),
        (dict(neighbor_search="brute"), ValueError, "'neighbor_search' must be one of 'auto', 'grid', 'scan', got 'brute'"),
    ],
)
def test_invalid_parameters_are_rejected(kwargs, error, match):
    with pytest.raises(error, match=match):
        TagEnv(num_envs=1, **kwargs)


@pytest.mark.parametrize("params, search", [
    (dict(), "grid"),                                          # auto, k = 10
    (dict(num_other_agents_observed=2), "scan"),               # auto, k = 2
    (dict(num_other_agents_observed=2, num_runners=183), "grid"),  # auto, 193 agents
    (dict(neighbor_search="scan", num_other_agents_observed=2), "scan"),
    (dict(neighbor_search="scan"), "scan"),                    # k = 10: slow, but asked for
    (dict(neighbor_search="grid", num_other_agents_observed=2), "grid"),
    (dict(use_full_observation=True, neighbor_search="scan"), "full"),
])
def test_search_choice_and_its_scratch_fields(params, search):
    env = TagEnv(num_envs=1, **params)
    assert env.search == search
    scanned, cells = env.state["scan_x"].shape[1], env.state["cell_start"].shape[1]
    n = env.num_agents
    assert (scanned, cells > 0) == {"scan": (n, False), "grid": (0, True), "full": (0, False)}[search]


def test_params_are_exposed():
    env = TagEnv(num_envs=1, num_runners=7, num_other_agents_observed=3)
    assert env.params.num_runners == 7 and env.params.grid_length == 20.0
    assert isinstance(env.params, SimpleNamespace)
