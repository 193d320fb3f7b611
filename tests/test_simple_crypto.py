"""SimpleCryptoEnv against VMAS 1.5.2's own simple_crypto: transitions in every action encoding
(messages are all there is), rewards (all-zero messages included), resets."""
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from mpe_comm_parity import run_parity
from mpe_parity import Errors
from torchrl_warp.envs.mpe import MPEEnv
from torchrl_warp.envs.simple_crypto import SimpleCryptoEnv

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")

E = 4 if SIM else 200  # the simulator runs every thread as a Python thread: tiny there
STEPS = 2 if SIM else 5
MAX_ERR = Errors()  # largest error seen per quantity (for inspection)


def load_bits(gen, venv, env, step):
    """Random keys and secrets per env, into VMAS's alice (key) and every agent (secret)."""
    shape = (venv.num_envs, venv.world.dim_c)
    key = torch.randint(0, 2, shape, generator=gen)
    secret = torch.randint(0, 2, shape, generator=gen)
    for a in venv.world.agents:
        a.secret = secret.clone()
        if a.speaker:
            a.key = key.clone()
    env.state["key"].copy_(key)
    env.state["secret"].copy_(secret)


@pytest.mark.sim
@pytest.mark.parametrize("encoding", ["continuous", "categorical"])
def test_matches_vmas(encoding):
    n = run_parity(vmas, SimpleCryptoEnv, encoding, E, STEPS, MAX_ERR, load_bits, gen_seed=len(encoding))
    assert n >= (1000 if not SIM else 1)


@pytest.mark.parametrize("encoding, dim_c", [("multi_categorical", 4), ("one_hot", 2), ("multi_one_hot", 5)])
def test_other_encodings_match_vmas(encoding, dim_c):
    assert run_parity(vmas, SimpleCryptoEnv, encoding, E, STEPS, MAX_ERR, load_bits, gen_seed=len(encoding),
                      vmas_kwargs=dict(dim_c=dim_c), dim_c=dim_c) >= 1000


def test_continuous_dim_c_matches_vmas():
    assert run_parity(vmas, SimpleCryptoEnv, "continuous", E, 2, MAX_ERR, load_bits, gen_seed=7,
                      vmas_kwargs=dict(dim_c=7), dim_c=7) >= 400


def test_rewards_by_hand():
    """Secret 1010, continuous messages: eve says 1000 (error 1), bob 1010 (error 0), so eve
    gets -1, bob and alice 1 - 0; then eve stays silent (all zeros: scores 0) and bob says
    0000 too: everyone 0. alice's message reaches eve and bob."""
    env = SimpleCryptoEnv(num_envs=2)
    td = env.reset()
    before = env.state["pos"].clone()
    env.state["secret"].copy_(torch.tensor([1, 0, 1, 0]))
    env.state["key"].copy_(torch.tensor([0, 1, 1, 0]))
    move = torch.zeros(2, 1, 2)

    def say(eve, bob, alice):
        for group, c in (("eve", eve), ("bob", bob), ("alice", alice)):
            td[group, "action"] = torch.cat([move, torch.tensor(c, dtype=torch.float32).expand(2, 1, 4)], -1)
        return env.step(td)["next"]

    out = say([1, 0, 0, 0], [1, 0, 1, 0], [0.5, 0.25, 0, 1])
    assert (out["eve", "reward"] == -1).all() and (out["bob", "reward"] == 1).all()
    assert (out["alice", "reward"] == 1).all()
    assert torch.equal(out["eve", "observation"][0, 0], torch.tensor([0.5, 0.25, 0, 1]))
    assert torch.equal(out["bob", "observation"][0, 0], torch.tensor([0, 1, 1, 0, 0.5, 0.25, 0, 1]))
    assert torch.equal(out["alice", "observation"][0, 0], torch.tensor([1, 0, 1, 0, 0, 1, 1, 0.0]))
    out = say([0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0])
    for group in ("eve", "bob", "alice"):
        assert (out[group, "reward"] == 0).all()
    assert torch.equal(env.state["pos"], before)  # immovable


def test_reset_matches_vmas_distribution():
    n = 20000
    env = SimpleCryptoEnv(num_envs=n, seed=3)
    td = env.reset()
    venv = vmas.make_env("simple_crypto", num_envs=n, device="cpu", seed=3)
    venv.reset()
    alice = venv.world.agents[2]
    for ours, theirs in ((env.state["key"], alice.key), (env.state["secret"], alice.secret)):
        assert set(ours.unique().tolist()) == {0, 1} == set(theirs.unique().tolist())
        assert ((ours.float().mean(0) - theirs.float().mean(0)).abs() < 0.03).all()
        assert ((ours.float().mean(0) - 0.5).abs() < 0.015).all()
    assert (env.state["key"] == env.state["secret"]).float().mean().sub(0.5).abs() < 0.01  # independent
    ours = env.state["pos"]
    theirs = torch.stack([a.state.pos for a in venv.world.agents], 1)
    for x in (ours, theirs):
        assert (x >= -1).all() and (x < 1).all() and x.min() < -0.999 and x.max() > 0.999
    assert (ours.mean(0) - theirs.mean(0)).abs().max() < 0.03
    assert (ours.std(0) - theirs.std(0)).abs().max() < 0.015
    assert (env.state["vel"] == 0).all() and (env.state["comm"] == 0).all()
    # first observations: VMAS's of the same key and secret
    for a in venv.world.agents:
        a.secret = env.state["secret"].long()
    alice.key = env.state["key"].long()
    for group, a in zip(("eve", "bob", "alice"), venv.world.agents):
        assert torch.equal(td[group, "observation"][:, 0], venv.scenario.observation(a))


@pytest.mark.sim
def test_specs_and_groups():
    for kwargs in (dict(), dict(continuous_actions=False, categorical_actions=False, multidiscrete_actions=True)):
        env = SimpleCryptoEnv(num_envs=2, max_steps=3, seed=0, dim_c=3, **kwargs)
        check_env_specs(env)
    assert [env.observation_spec[g, "observation"].shape[-1] for g in ("eve", "bob", "alice")] == [3, 6, 6]
    assert env.full_action_spec["bob", "action"].shape == (2, 1, 9)  # one-hot 3 + 3 + 3
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "terminated"][:, 2].all() and not td["next", "terminated"][:, :2].any()
    assert torch.equal(td["next", "bob", "reward"], td["next", "alice", "reward"])
    env = MPEEnv("simple_crypto", num_envs=2, continuous_actions=False, dim_c=2)
    assert env.full_action_spec["eve", "action"].space.n == 18
    with pytest.raises(ValueError):
        SimpleCryptoEnv(num_envs=2, dim_c=0)


def test_max_errors_seen():
    """Prints the largest errors of the parity tests that ran before (pytest -s shows them)."""
    print({k: f"{v:.2g}" for k, v in sorted(MAX_ERR.items())})
