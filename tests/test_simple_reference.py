"""SimpleReferenceEnv against VMAS 1.5.2's own simple_reference: transitions in every action
encoding (messages included), rewards, resets."""
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from mpe_comm_parity import run_parity
from mpe_parity import Errors, entities
from torchrl_warp.envs.simple_reference import LANDMARK_COLORS, SimpleReferenceEnv

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")

E = 4 if SIM else 200  # the simulator runs every thread as a Python thread: tiny there
STEPS = 2 if SIM else 5
MAX_ERR = Errors()  # largest error seen per quantity (for inspection)


def set_goals(venv, k0, k1):
    venv.world.agents[0].goal_b = venv.world.landmarks[k0]
    venv.world.agents[1].goal_b = venv.world.landmarks[k1]


def load_goals(gen, venv, env, step):
    """VMAS keeps one goal per agent for the whole batch: new ones each step, copied into every
    env of ours."""
    k0, k1 = (int(k) for k in torch.randint(0, 3, (2,), generator=gen))
    set_goals(venv, k0, k1)
    env.state["goal"][:, 0] = k0
    env.state["goal"][:, 1] = k1


@pytest.mark.sim
@pytest.mark.parametrize("encoding", ["continuous", "categorical"])
def test_matches_vmas(encoding):
    n = run_parity(vmas, SimpleReferenceEnv, encoding, E, STEPS, MAX_ERR, load_goals, gen_seed=len(encoding))
    assert n >= (1000 if not SIM else 1)


@pytest.mark.parametrize("encoding", ["multi_categorical", "one_hot", "multi_one_hot"])
def test_other_encodings_match_vmas(encoding):
    assert run_parity(vmas, SimpleReferenceEnv, encoding, E, STEPS, MAX_ERR, load_goals,
                      gen_seed=len(encoding)) >= 1000


def test_out_of_range_actions_clamped_like_vmas_clamp_actions():
    """check_actions=False: ours clamps forces to [-1, 1] and messages to [0, 1] (NaN as 0);
    VMAS with clamp_actions=True clamps them too."""
    run_parity(vmas, SimpleReferenceEnv, "continuous", E, 2, MAX_ERR, load_goals, gen_seed=11, wild=True)


def test_messages_by_hand():
    """Flat discrete action (x * 3 + y) * 10 + c: agent 0 sends message 7 and moves (+1, -1)
    (action (2 * 3 + 1) * 10 + 7 = 77), agent 1 sends 0 and stays (action 0); each observes the
    other's message in its last 10 floats."""
    env = SimpleReferenceEnv(num_envs=2, continuous_actions=False)
    td = env.reset()
    td["agents", "action"] = torch.tensor([[77, 0], [77, 0]])
    out = env.step(td)["next"]
    seven, zero = torch.eye(10)[7].expand(2, 10), torch.eye(10)[0].expand(2, 10)
    assert torch.equal(env.state["comm"][:, 0], seven) and torch.equal(env.state["comm"][:, 1], zero)
    assert torch.equal(out["agents", "observation"][:, 1, -10:], seven)
    assert torch.equal(out["agents", "observation"][:, 0, -10:], zero)
    assert torch.allclose(env.state["vel"][:, 0], torch.tensor([0.1, -0.1]).expand(2, 2))
    assert (env.state["vel"][:, 1] == 0).all()


def test_reset_matches_vmas_distribution():
    """Positions and goals against VMAS's own resets (statistics), and the first observations
    against VMAS's observation of the same state."""
    n = 20000
    env = SimpleReferenceEnv(num_envs=n, seed=3)
    env.reset()
    venv = vmas.make_env("simple_reference", num_envs=n, device="cpu", seed=3)
    venv.reset()
    ours = env.state["pos"]
    theirs = torch.stack([e.state.pos for e in entities(venv)], 1)
    for x in (ours, theirs):
        assert (x >= -1).all() and (x < 1).all() and x.min() < -0.999 and x.max() > 0.999
    assert (ours.mean(0) - theirs.mean(0)).abs().max() < 0.03
    assert (ours.std(0) - theirs.std(0)).abs().max() < 0.015
    assert (env.state["vel"] == 0).all() and (env.state["comm"] == 0).all()
    # VMAS draws the goals once per (full) reset: their frequencies over many resets, ours over envs
    small = vmas.make_env("simple_reference", num_envs=1, device="cpu", seed=4)
    vmas_goals = []
    for _ in range(600):
        small.reset()
        vmas_goals.append([small.world.landmarks.index(a.goal_b) for a in small.world.agents])
    vmas_goals = torch.tensor(vmas_goals)
    ours_goals = env.state["goal"].long()
    for i in range(2):
        vmas_freq = torch.bincount(vmas_goals[:, i], minlength=3) / 600
        our_freq = torch.bincount(ours_goals[:, i], minlength=3) / n
        assert (vmas_freq - 1 / 3).abs().max() < 0.07 and (our_freq - 1 / 3).abs().max() < 0.015
        assert ((vmas_freq - our_freq).abs() < 0.08).all()
    same = (ours_goals[:, 0] == ours_goals[:, 1]).float().mean()  # independent draws
    assert abs(same - 1 / 3) < 0.015
    # first observations: VMAS's observation of our reset state
    small = vmas.make_env("simple_reference", num_envs=64, device="cpu", seed=5)
    small.reset()
    env = SimpleReferenceEnv(num_envs=64, seed=5)
    td = env.reset()
    for i, e in enumerate(entities(small)):
        e.set_pos(env.state["pos"][:, i].clone(), batch_index=None)
    goals = env.state["goal"]
    for k0 in range(3):
        for k1 in range(3):
            idx = (goals[:, 0] == k0) & (goals[:, 1] == k1)
            set_goals(small, k0, k1)
            for i, a in enumerate(small.world.agents):
                theirs = small.scenario.observation(a)
                assert torch.allclose(td["agents", "observation"][idx, i], theirs[idx], atol=1e-6)
            assert torch.allclose(theirs[0, 8:11], torch.tensor(LANDMARK_COLORS[k1]))


@pytest.mark.sim
def test_specs_and_shared_reward():
    for kwargs in (dict(), dict(continuous_actions=False, categorical_actions=False, multidiscrete_actions=True)):
        env = SimpleReferenceEnv(num_envs=2, max_steps=3, seed=0, **kwargs)
        check_env_specs(env)
    assert env.observation_spec["agents", "observation"].shape == (2, 2, 21)
    assert env.full_action_spec["agents", "action"].shape == (2, 2, 16)  # one-hot 3 + 3 + 10
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "terminated"][:, 2].all() and not td["next", "terminated"][:, :2].any()
    r = td["next", "agents", "reward"]
    assert (r == r[:, :, :1]).all()


def test_render_colours_each_agent_as_the_landmark_it_must_reach():
    env = SimpleReferenceEnv(num_envs=2, seed=0)
    env.reset()
    env.state["pos"][0] = torch.tensor([[-0.5, -0.5], [0.5, 0.5], [-0.5, 0.5], [0.0, 0.0], [0.5, -0.5]])
    env.state["goal"][0] = torch.tensor([0, 2])  # agent 1 must reach landmark 0 (red), agent 0 landmark 2
    frame = env.render()
    n = frame.shape[0]
    at = lambda x, y: frame[int((1 - y) / 2 * n), int((x + 1) / 2 * n)].tolist()  # noqa: E731
    assert at(-0.5, -0.5) == [64, 64, 191] and at(0.5, 0.5) == [191, 64, 64]
    assert env.agents[0].color == (0.25, 0.25, 0.25)


def test_max_errors_seen():
    """Prints the largest errors of the parity tests that ran before (pytest -s shows them)."""
    print({k: f"{v:.2g}" for k, v in sorted(MAX_ERR.items())})
