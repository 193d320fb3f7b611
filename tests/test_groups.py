"""Groups that differ: each group its own observation shape and action spec
(``Layout.group_specs``), discrete and continuous, on every backend."""
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical, MultiCategorical
from torchrl.envs.utils import check_env_specs

from group_envs import MoversEnv, SpeakersEnv
from torchrl_warp import GroupSpec, Layout


@pytest.mark.sim
def test_groups_have_their_own_specs_and_pass_torchrls_checks():
    env = SpeakersEnv(num_envs=3, seed=0)
    assert env.observation_spec["speakers", "observation"].shape == (3, 1, 3)
    assert env.observation_spec["listeners", "observation"].shape == (3, 2, 2, 3)
    assert isinstance(env.action_spec["speakers", "action"], Categorical)
    assert isinstance(env.action_spec["listeners", "action"], MultiCategorical)
    assert env.action_spec["listeners", "action"].shape == (3, 2, 2)
    assert env.state["observation"].shape == (3, 3, 6) and env.state["action"].shape == (3, 3, 2)
    check_env_specs(env)
    td = env.rollout(4)
    assert td["next", "listeners", "observation"].shape == (3, 4, 2, 2, 3)


@pytest.mark.sim
def test_each_group_reads_its_actions_and_writes_its_observations():
    env = SpeakersEnv(num_envs=2, seed=0)
    env.reset()
    speak = torch.tensor([[2], [1]])
    listen = torch.tensor([[[3, 1], [0, 1]], [[2, 0], [1, 1]]])
    td = TensorDict({"speakers": TensorDict({"action": speak}, [2, 1]),
                     "listeners": TensorDict({"action": listen}, [2, 2])}, [2])
    out = env.step(td)["next"]
    torch.testing.assert_close(out["speakers", "observation"], speak[..., None].float() * 10 + torch.arange(3.0))
    flat = listen[..., torch.arange(6) % 2].float() * 100 + torch.arange(6.0)
    torch.testing.assert_close(out["listeners", "observation"], flat.unflatten(-1, (2, 3)))
    assert (out["speakers", "reward"] == 1).all() and (out["listeners", "reward"] == 2).all()


@pytest.mark.sim
def test_continuous_groups_and_their_bounds():
    env = MoversEnv(num_envs=2, seed=0)
    check_env_specs(env)
    env.reset()
    move = torch.tensor([[[0.5, -0.25], [1.0, -1.0]], [[0.0, 0.1], [-0.5, 0.5]]])
    talk = torch.tensor([[[0.1, 0.2, 0.3]], [[1.0, 0.0, 0.5]]])
    td = TensorDict({"movers": TensorDict({"action": move}, [2, 2]),
                     "talkers": TensorDict({"action": talk}, [2, 1])}, [2])
    out = env.step(td.clone())["next"]
    torch.testing.assert_close(out["movers", "observation"], move[..., torch.arange(3) % 2] * 10 + torch.arange(3.0))
    torch.testing.assert_close(out["talkers", "observation"], talk[..., torch.arange(4) % 3] * 100 + torch.arange(4.0))
    before = env.state.clone()
    for bad, match in [(talk + 1, "outside its spec"), (talk * float("nan"), "NaN or infinite")]:
        bad_td = td.clone()
        bad_td["talkers", "action"] = bad
        with pytest.raises(ValueError, match=match):
            env.step(bad_td)
    assert (env.state == before).all()


def test_groups_must_share_an_action_dtype_and_exist():
    with pytest.raises(ValueError, match="one dtype"):
        Layout({"a": 1, "b": 1}, (3,), Categorical(3), [], (), (),
               group_specs={"b": GroupSpec(None, Bounded(0.0, 1.0, (2,)))})
    with pytest.raises(ValueError, match="does not have: c"):
        Layout({"a": 1}, (3,), Categorical(3), [], (), (), group_specs={"c": GroupSpec((2,))})
