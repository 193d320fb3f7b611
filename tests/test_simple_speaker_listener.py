"""SimpleSpeakerListenerEnv against VMAS 1.5.2's own simple_speaker_listener: transitions in
every action encoding (messages included), rewards, resets."""
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from mpe_comm_parity import run_parity
from mpe_parity import Errors, entities
from torchrl_warp.envs.simple_speaker_listener import LANDMARK_COLORS, SimpleSpeakerListenerEnv

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")

E = 4 if SIM else 200  # the simulator runs every thread as a Python thread: tiny there
STEPS = 2 if SIM else 5
MAX_ERR = Errors()  # largest error seen per quantity (for inspection)


def load_goal(gen, venv, env, step):
    """VMAS keeps one goal landmark for the whole batch: a new one each step, copied into
    every env of ours."""
    k = int(torch.randint(0, 3, (1,), generator=gen)) if step > 2 else step
    venv.world.agents[0].goal_b = venv.world.landmarks[k]
    env.state["goal"].fill_(k)


@pytest.mark.sim
@pytest.mark.parametrize("encoding", ["continuous", "categorical"])
def test_matches_vmas(encoding):
    n = run_parity(vmas, SimpleSpeakerListenerEnv, encoding, E, STEPS, MAX_ERR, load_goal, gen_seed=len(encoding))
    assert n >= (1000 if not SIM else 1)


@pytest.mark.parametrize("encoding", ["multi_categorical", "one_hot", "multi_one_hot"])
def test_other_encodings_match_vmas(encoding):
    assert run_parity(vmas, SimpleSpeakerListenerEnv, encoding, E, STEPS, MAX_ERR, load_goal,
                      gen_seed=len(encoding)) >= 1000


def test_message_by_hand():
    """The speaker's flat discrete action 2 is (stay, stay, message 2): no move, message one-hot
    [0, 0, 1], which the listener observes last; the listener's action 5 = (1, 2) is (-1, +1)."""
    env = SimpleSpeakerListenerEnv(num_envs=2, continuous_actions=False)
    td = env.reset()
    before = env.state["pos"].clone()
    td["speaker", "action"] = torch.tensor([[2], [2]])
    td["listener", "action"] = torch.tensor([[5], [5]])
    out = env.step(td)["next"]
    one_hot = torch.tensor([0.0, 0.0, 1.0]).expand(2, 3)
    assert torch.equal(env.state["comm"][:, 0], one_hot)
    assert torch.equal(out["listener", "observation"][:, 0, -3:], one_hot)
    assert torch.equal(env.state["pos"][:, 0], before[:, 0])  # the speaker is immovable
    assert torch.allclose(env.state["vel"][:, 1], torch.tensor([-0.1, 0.1]).expand(2, 2))


def test_reset_matches_vmas_distribution():
    """Positions and goals against VMAS's own resets (statistics), and the first observations
    against VMAS's observation of the same state."""
    n = 20000
    env = SimpleSpeakerListenerEnv(num_envs=n, seed=3)
    env.reset()
    venv = vmas.make_env("simple_speaker_listener", num_envs=n, device="cpu", seed=3)
    venv.reset()
    ours = env.state["pos"]
    theirs = torch.stack([e.state.pos for e in entities(venv)], 1)
    for x in (ours, theirs):
        assert (x >= -1).all() and (x < 1).all() and x.min() < -0.999 and x.max() > 0.999
    assert (ours.mean(0) - theirs.mean(0)).abs().max() < 0.03
    assert (ours.std(0) - theirs.std(0)).abs().max() < 0.015
    assert (env.state["vel"] == 0).all() and (env.state["comm"] == 0).all()
    # VMAS draws one goal per (full) reset: its frequencies over many resets, ours over envs
    small = vmas.make_env("simple_speaker_listener", num_envs=1, device="cpu", seed=4)
    vmas_goals = []
    for _ in range(600):
        small.reset()
        vmas_goals.append(small.world.landmarks.index(small.world.agents[0].goal_b))
    vmas_freq = torch.bincount(torch.tensor(vmas_goals), minlength=3) / 600
    our_freq = torch.bincount(env.state["goal"].long(), minlength=3) / n
    assert (vmas_freq - 1 / 3).abs().max() < 0.07 and (our_freq - 1 / 3).abs().max() < 0.015
    assert ((vmas_freq - our_freq).abs() < 0.08).all()
    # first observations: VMAS's observation of our reset state
    small = vmas.make_env("simple_speaker_listener", num_envs=64, device="cpu", seed=5)
    small.reset()
    env = SimpleSpeakerListenerEnv(num_envs=64, seed=5)
    td = env.reset()
    for i, e in enumerate(entities(small)):
        e.set_pos(env.state["pos"][:, i].clone(), batch_index=None)
    for k in range(3):
        idx = env.state["goal"] == k
        small.world.agents[0].goal_b = small.world.landmarks[k]
        speaker, listener = (small.scenario.observation(a) for a in small.world.agents)
        assert torch.allclose(td["speaker", "observation"][idx, 0], speaker[idx], atol=1e-6)
        assert torch.allclose(td["listener", "observation"][idx, 0], listener[idx], atol=1e-6)
        assert torch.allclose(speaker[0], torch.tensor(LANDMARK_COLORS[k]))


@pytest.mark.sim
def test_specs_and_shared_reward():
    for kwargs in (dict(), dict(continuous_actions=False, categorical_actions=False, multidiscrete_actions=True)):
        env = SimpleSpeakerListenerEnv(num_envs=2, max_steps=3, seed=0, **kwargs)
        check_env_specs(env)
    assert env.observation_spec["speaker", "observation"].shape == (2, 1, 3)
    assert env.observation_spec["listener", "observation"].shape == (2, 1, 11)
    assert env.full_action_spec["speaker", "action"].shape == (2, 1, 9)  # one-hot 3 + 3 + 3
    assert env.full_action_spec["listener", "action"].shape == (2, 1, 6)
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "terminated"][:, 2].all() and not td["next", "terminated"][:, :2].any()
    assert torch.equal(td["next", "speaker", "reward"], td["next", "listener", "reward"])


def pixel(frame, xy):
    """The frame's pixel at world point ``xy`` (the view is [-1, 1]^2 when everything lies inside)."""
    n = frame.shape[0]
    return frame[int((1 - xy[1]) / 2 * n), int((xy[0] + 1) / 2 * n)].tolist()


def test_render_shows_the_goal_on_the_listener():
    env = SimpleSpeakerListenerEnv(num_envs=2, seed=0)
    env.reset()
    env.state["pos"][1] = torch.tensor([[-0.5, -0.5], [0.5, 0.5], [-0.5, 0.5], [0.0, 0.0], [0.5, -0.5]])
    env.state["goal"][1] = 1
    frame = env.render(env_index=1)
    assert pixel(frame, (0.5, 0.5)) == [153, 255, 153]  # green + 0.45, clipped to 1
    assert pixel(frame, (0.0, 0.0)) == [38, 166, 38]  # landmark 1 itself
    assert pixel(frame, (-0.5, -0.5)) == [64, 64, 64]  # the speaker, gray
    assert env.agents[1].color == (0.25, 0.25, 0.25)  # the scenario's colours are left as they were


def test_max_errors_seen():
    """Prints the largest errors of the parity tests that ran before (pytest -s shows them)."""
    print({k: f"{v:.2g}" for k, v in sorted(MAX_ERR.items())})
