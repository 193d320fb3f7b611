"""Groups that differ: each group its own observation shape and action spec
(``Layout.group_specs``), discrete and continuous, on every backend."""
import numba
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical, MultiCategorical
from torchrl.envs.utils import check_env_specs

from torchrl_warp import GroupSpec, Layout, Param, WarpEnv


@numba.njit
def clear(env, agent, observation):
    for i in range(observation.shape[2]):
        observation[env, agent, i] = 0.0


@numba.njit
def echo(env, agent, action, observation, reward, first_group, sizes):
    """Each agent writes its own group's observation entries from its own group's actions:
    ``sizes`` = (first group's observation size, its action size, the second group's two)."""
    second = agent >= first_group
    n_obs, n_act = sizes[2 * second], sizes[2 * second + 1]
    scale = 100.0 if second else 10.0
    for i in range(n_obs):
        observation[env, agent, i] = action[env, agent, i % n_act] * scale + i
    reward[env, agent] = 2.0 if second else 1.0


@numba.njit
def finish(env, agent, step_count, done, terminated, truncated, max_steps):
    if agent != 0:
        return
    truncated[env] = step_count[env] >= max_steps
    terminated[env] = False
    done[env] = truncated[env]


class SpeakersEnv(WarpEnv):
    """Two groups that differ: "speakers" observe (3,) and pick ``Categorical(3)``;
    "listeners" observe (2, 3) and pick ``MultiCategorical([4, 2])``."""

    parameters = {"speakers": Param(1, "agents of the first group", ge=1),
                  "listeners": Param(2, "agents of the second group", ge=1),
                  "max_steps": Param(5, "truncated after this many steps", ge=1)}

    def _layout(self, p):
        return Layout(
            groups={"speakers": p.speakers, "listeners": p.listeners},
            observation_shape=(3,), action_spec=Categorical(3), fields=[],
            group_specs={"listeners": GroupSpec((2, 3), MultiCategorical([4, 2]))},
            reset=(clear,), step=(echo, finish),
            constants={"first_group": p.speakers, "sizes": torch.tensor([3, 1, 6, 2])},
        )


class MoversEnv(WarpEnv):
    """Continuous actions that differ: "movers" ``Bounded(-1, 1, (2,))``, observe (3,);
    "talkers" ``Bounded(0, 1, (3,))``, observe (4,)."""

    parameters = {"max_steps": Param(5, "truncated after this many steps", ge=1)}

    def _layout(self, p):
        return Layout(
            groups={"movers": 2, "talkers": 1},
            observation_shape=(3,), action_spec=Bounded(-1.0, 1.0, (2,)), fields=[],
            group_specs={"talkers": GroupSpec((4,), Bounded(0.0, 1.0, (3,)))},
            reset=(clear,), step=(echo, finish), constants={"first_group": 2, "sizes": torch.tensor([3, 2, 4, 3])},
        )


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
