"""A small env that behaves differently under the CUDA simulator, for tests/test_check_env.py.

``DriftEnv``: agents on a line drift by their action; at step ``ODD_STEP`` the agent
``ODD_AGENT`` of env ``ODD_ENV`` has its ``pos[..., 1]`` bumped by ``BUMP``, which is
0 on the CPU and CUDA backends and nonzero in the simulator (a module constant that
the CPU kernel freezes at compile time, read live by the simulator). Episodes last
``max_steps`` steps, so a rollout includes automatic resets.

``reference_step`` is the env's step in numpy (without the bump); ``broken_reference``
is the same with an error injected at ``BROKEN_STEP``.
"""
import numba
import numpy as np
from torchrl.data import Categorical

from torchrl_warp import Field, Layout, Param, WarpEnv
from torchrl_warp.cuda.rng import uniform
from torchrl_warp.simulator import simulator_enabled

BUMP = 0.25 if simulator_enabled() else 0.0
ODD_STEP, ODD_ENV, ODD_AGENT = 3, 1, 2
BROKEN_STEP, BROKEN_ENV, BROKEN_AGENT = 2, 0, 1


@numba.njit
def start(env, agent, seed, episode, pos, observation):
    pos[env, agent, 0] = uniform(seed, env, episode[env], 0, agent, 0)
    pos[env, agent, 1] = agent
    observation[env, agent, 0] = pos[env, agent, 0]
    observation[env, agent, 1] = pos[env, agent, 1]


@numba.njit
def drift(env, agent, action, pos, observation, reward, step_count, done, terminated, truncated, max_steps):
    pos[env, agent, 0] += 0.1 * (action[env, agent] - 1)
    if step_count[env] == ODD_STEP and env == ODD_ENV and agent == ODD_AGENT:
        pos[env, agent, 1] += BUMP
    observation[env, agent, 0] = pos[env, agent, 0]
    observation[env, agent, 1] = pos[env, agent, 1]
    reward[env, agent] = pos[env, agent, 0]
    if agent == 0:
        truncated[env] = step_count[env] >= max_steps
        terminated[env] = False
        done[env] = truncated[env]


class DriftEnv(WarpEnv):
    """Agents drift on a line by their action (0: left, 1: stay, 2: right); reward = position."""

    parameters = {
        "num_walkers": Param(3, "agents of the group 'walkers'", ge=1),
        "max_steps": Param(4, "truncated after this many steps", ge=1),
    }

    def _layout(self, p):
        return Layout(groups={"walkers": p.num_walkers}, observation_shape=(2,), action_spec=Categorical(3),
                      fields=[Field("pos", (2,), per_agent=True)], reset=(start,), step=(drift,))


def reference_step(state, action, params):
    """``DriftEnv``'s step in numpy: ``state`` (name -> array) and ``action`` ``[E, N]`` to the next state."""
    pos = state["pos"].copy()
    pos[..., 0] = pos[..., 0] + 0.1 * (action - 1)  # float64, rounded to float32 as the kernel does
    step_count = state["step_count"] + 1
    truncated = step_count >= params.max_steps
    return {"pos": pos, "observation": pos.copy(), "reward": pos[..., 0].copy(), "step_count": step_count,
            "truncated": truncated, "terminated": np.zeros_like(truncated), "done": truncated}


def broken_reference(state, action, params):
    """``reference_step`` with a wrong reward at step ``BROKEN_STEP`` of the first episode (env
    ``BROKEN_ENV``, agent ``BROKEN_AGENT``)."""
    out = reference_step(state, action, params)
    if state["episode"][BROKEN_ENV] == 1 and state["step_count"][BROKEN_ENV] + 1 == BROKEN_STEP:
        out["reward"][BROKEN_ENV, BROKEN_AGENT] += 1.0
    return out
