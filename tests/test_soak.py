"""The soak at test size: hostile random actions and random resets, checked every step
(the long GPU runs use the same function: ``python -m torchrl_warp.soak``)."""
import pytest
import torch

from all_envs import ENVS, make
from conftest import SIM
from torchrl_warp.soak import GROWTH_LIMIT_BYTES, SoakReport, soak

STEPS = 30 if SIM else 500


@pytest.mark.sim
@pytest.mark.parametrize("name", ENVS)
def test_soak_finds_nothing(name):
    env = make(name, check_actions=False, seed=1)
    report = soak(env, STEPS, sample_every=max(1, STEPS // 40))
    assert report.problems() == []
    assert report.episodes > 0, "the soak reset no env"
    assert report.agent_steps == STEPS * env.num_envs * env.num_agents


def test_the_soak_reports_what_goes_wrong(monkeypatch):
    """The checks can fail: an env whose kernels write NaN, and memory that keeps growing."""
    env = make("cartpole", check_actions=False, seed=1)
    original = env._launch

    def poisoned(kind, copy_outputs=True):
        original(kind, copy_outputs)
        env.state["kinematics"][0, 0, 1] = float("nan")

    monkeypatch.setattr(env, "_launch", poisoned)
    assert "non-finite floats" in " ".join(soak(env, 20).problems())
    step = 2 * GROWTH_LIMIT_BYTES
    grow = SoakReport("x", 1, 1, host_bytes=[0, 0, 0, step, 2 * step, 3 * step, 4 * step, 5 * step])
    assert grow.problems() == [f"host memory grew by {4 * step / 2**20:.1f} MiB after the warm-up"]
    # one buffer more now and then (a random reset's) is no growth
    wobble = SoakReport("x", 1, 1, device_bytes=[0, 0, step, 0, 0, step, 0, 0])
    assert wobble.problems() == []


def test_the_soak_command_line(tmp_path, capsys):
    from torchrl_warp.soak import main

    main(["cartpole", "--num-envs", "4", "--agent-steps", "400", "--json", str(tmp_path / "r.json")])
    assert '"problems": []' in capsys.readouterr().out
    assert (tmp_path / "r.json").exists()
