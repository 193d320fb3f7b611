"""Two small envs whose groups differ (observation shapes, action specs; discrete and
continuous): the examples of ``Layout.group_specs``, shared by the tests."""
import numba
import torch
from torchrl.data import Bounded, Categorical, MultiCategorical

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
            reset=(), observe=(clear,), step=(echo, finish),
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
            reset=(), observe=(clear,), step=(echo, finish), constants={"first_group": 2, "sizes": torch.tensor([3, 2, 4, 3])},
        )
