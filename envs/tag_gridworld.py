"""Tag (gridworld): WarpDrive's ``TagGridWorld`` / ``CUDATagGridWorld``, as a TorchRL env.

The kernels are in :mod:`torchrl_warp.cuda.tag_gridworld`.

Examples:
    >>> env = TagGridWorldEnv(num_envs=4, num_taggers=3)
    >>> env.observation_spec["taggers", "observation"].shape   # full observation: 4 * 4 + 1
    torch.Size([4, 3, 17])
    >>> env.action_spec["runners", "action"].shape               # one of 5 moves
    torch.Size([4, 1])
    >>> TagGridWorldEnv(num_envs=2, use_full_observation=False).observation_spec["runners", "observation"].shape
    torch.Size([2, 1, 6])
"""
import numpy as np
import torch
from torchrl.data import Categorical

from torchrl_warp.cuda import tag_gridworld as kernels
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, Layout
from torchrl_warp.params import Param

__all__ = ["TagGridWorldEnv", "reward_table", "GRID_LENGTH_MAX", "STARTS", "GRIDWORLD_COLORS"]

#: the largest ``grid_length``: squared distances (at most ``2 L^2``) fit the 31 bits of a key
GRID_LENGTH_MAX = 32767
#: values of ``TagGridWorldEnv(starting_locations=...)``
STARTS = ("center", "random")


#: ``TagGridWorldEnv.render``'s colours (floats in [0, 1])
GRIDWORLD_COLORS = {"cell": (1.0, 1.0, 1.0), "grid": (0.8, 0.8, 0.8), "tagger": (0.85, 0.15, 0.15),
                    "runner": (0.15, 0.35, 0.85)}


def reward_table(p) -> torch.Tensor:
    """``[kind, tagged, wall hit]`` -> reward (kind 0: tagger, 1: the runner), summed in
    float64 as WarpDrive's CPU env sums its tag and wall terms, then rounded to float32.

    >>> from types import SimpleNamespace
    >>> t = reward_table(SimpleNamespace(tag_reward_for_tagger=10.0, tag_penalty_for_runner=2.0,
    ...                                  step_cost_for_tagger=0.01, wall_hit_penalty=0.1))
    >>> t[0, 1, 0].item(), t[1, 0, 1].item()   # a tagger when tagged; the runner against a wall
    (10.0, -0.09000000357627869)
    """
    tag = torch.tensor([[-p.step_cost_for_tagger, p.tag_reward_for_tagger],
                        [p.step_cost_for_tagger, -p.tag_penalty_for_runner]], dtype=torch.float64)
    wall = torch.tensor([0.0, -p.wall_hit_penalty], dtype=torch.float64)
    return (tag[:, :, None] + wall[None, None, :]).float()


class TagGridWorldEnv(WarpEnv):
    """Taggers chase one runner on the grid ``{0, ..., grid_length}^2`` (WarpDrive's tag_gridworld).

    Two groups: ``"taggers"`` (``num_taggers`` agents, kernel indices first) and
    ``"runners"`` (one agent, the last index). Each agent picks one of 5 moves
    (``Categorical(5)``: stay, +x, -x, +y, -y); moves off the grid are clipped, with
    ``-wall_hit_penalty``. The runner is tagged when a tagger ends a step on its cell:
    every tagger gets ``tag_reward_for_tagger``, the runner ``-tag_penalty_for_runner``,
    and the episode terminates; otherwise taggers get ``-step_cost_for_tagger`` and the
    runner ``+step_cost_for_tagger``. Truncated after ``episode_length`` steps. No agent
    leaves before the episode ends, so the done flags are the env's (no per-agent ones).

    Episodes start from WarpDrive's cells: taggers at the centre ``int(grid_length / 2)``,
    the runner at ``(0, 0)``; ``starting_locations="random"`` puts the taggers on uniform
    cells of ``[1, grid_length - 1]^2`` instead (what WarpDrive's
    ``CUDATagGridWorldWithResetPool`` draws its start pool from), new ones every episode.
    The observation (``use_full_observation``: every agent's cell, else each agent's own
    cell and one other's) is laid out in :mod:`torchrl_warp.cuda.tag_gridworld`.

    State fields: ``loc_x``, ``loc_y`` (int32 cells, ``[E, N]``), ``wall_hit`` (this step's
    clips), and the kernels' scratch ``runner_next``, ``nearest_key``, ``nearest_slot``.

    WarpDrive's CPU env (``TagGridWorld``) and its CUDA step differ in details; this env
    follows the CPU env: rewards are summed in float64 and rounded once (the CUDA kernel
    sums in float32: the last bit can differ); a move that is clipped costs one
    ``wall_hit_penalty`` however many coordinates were clipped (the CUDA kernel charges
    each clipped coordinate; with one-coordinate moves from cells on the grid the two agree);
    time-outs are ``step >= episode_length`` (CUDA: ``==``). The CUDA kernel also caps an
    env at 1024 agents (one thread block) and reads actions unchecked; here any number
    works and out-of-range actions are clamped when ``check_actions=False``.
    """

    parameters = {
        "num_taggers": Param(10, "agents of the group 'taggers'; one runner follows them", ge=1),
        "grid_length": Param(10, "cells run from 0 to grid_length on each axis", ge=1, le=GRID_LENGTH_MAX),
        "episode_length": Param(100, "steps before the episode is truncated", ge=1),
        "starting_locations": Param("center", "taggers start on the centre cell (WarpDrive's) or on random cells; "
                                    "the runner at (0, 0)", choices=STARTS),
        "wall_hit_penalty": Param(0.1, "subtracted from an agent's reward when its move is clipped at the edge"),
        "tag_reward_for_tagger": Param(10.0, "every tagger's reward when the runner is tagged"),
        "tag_penalty_for_runner": Param(2.0, "subtracted from the runner's reward when it is tagged"),
        "step_cost_for_tagger": Param(0.01, "subtracted from each tagger's reward (added to the runner's) "
                                      "every step without a tag"),
        "use_full_observation": Param(True, "every agent observes every agent's cell (else its own and one other's)"),
    }

    def _check_params(self, p):
        if p.starting_locations == "random" and p.grid_length < 2:
            raise ValueError(f"TagGridWorldEnv: starting_locations='random' needs grid_length >= 2 (cells "
                             f"1..grid_length-1 to start on), got grid_length={p.grid_length}")

    def _layout(self, p):
        n = p.num_taggers + 1
        agent = dict(per_agent=True)
        observe = kernels.observe_full if p.use_full_observation else kernels.observe_nearest
        return Layout(
            groups={"taggers": p.num_taggers, "runners": 1},
            observation_shape=(kernels.observation_size(n, p.use_full_observation),),
            action_spec=Categorical(len(kernels.MOVES), dtype=torch.int64),
            fields=[
                Field("loc_x", dtype=torch.int32, **agent),
                Field("loc_y", dtype=torch.int32, **agent),
                Field("wall_hit", dtype=torch.bool, **agent),
                # the runner's cell after this step's move, before it takes it
                Field("runner_next", (2,), torch.int32, scratch=True),
                # the minimum of (squared distance << 32 | index) over the taggers, two slots;
                # the slot the move fills and the one the second phase reads
                Field("nearest_key", (2,), torch.int64, scratch=True),
                Field("nearest_slot", (2,), torch.int32, scratch=True),
            ],
            reset=(kernels.place,),
            observe=(kernels.offer_key, (observe, kernels.advance_key)),
            step=(kernels.move,
                  (kernels.commit_runner, kernels.score, observe, kernels.end_of_step, kernels.advance_key)),
            outputs_from_state=True,
            constants={
                "moves": torch.from_numpy(kernels.MOVES),
                "rewards": reward_table(p),
                "start_cell": int(0.5 * p.grid_length),
                "random_start": p.starting_locations == "random",
            },
        )

    def render(self, mode: str = "rgb_array", env_index: int = 0, resolution: int = 400) -> np.ndarray:
        """An RGB frame ``[resolution, resolution, 3]`` (uint8) of env ``env_index``: the
        ``(grid_length + 1)^2`` cells (``x`` right, ``y`` up, cell ``(0, 0)`` bottom left; grid
        lines when cells are 4 pixels or more), a red square on each cell a tagger is on, the
        runner a blue disc on its cell (on top: a tag shows both). Only that env's cells are
        copied to the host. Only ``mode="rgb_array"``: there is no window."""
        from torchrl_warp.render import Canvas, check_render_args

        i = check_render_args(self, mode, env_index, resolution)
        x = self.state.get("loc_x")[i].cpu().numpy()
        y = self.state.get("loc_y")[i].cpu().numpy()
        n = self.params.grid_length + 1
        canvas = Canvas(resolution, resolution, (0.0, n), (0.0, n), GRIDWORLD_COLORS["cell"])
        if resolution / n >= 4:
            for k in range(n + 1):
                canvas.line((k, 0.0), (k, n), canvas.pixel, GRIDWORLD_COLORS["grid"])
                canvas.line((0.0, k), (n, k), canvas.pixel, GRIDWORLD_COLORS["grid"])
        for cx, cy in set(zip(x[:-1].tolist(), y[:-1].tolist())):
            canvas.rectangle(cx + 0.1, cy + 0.1, cx + 0.9, cy + 0.9, GRIDWORLD_COLORS["tagger"])
        canvas.disc((x[-1] + 0.5, y[-1] + 0.5), 0.3, GRIDWORLD_COLORS["runner"])
        return canvas.frame()

    @property
    def tagged(self) -> torch.Tensor:
        """Whether a tagger shares the runner's cell, per env (``[num_envs]``)."""
        x, y = self.state["loc_x"], self.state["loc_y"]
        return ((x[:, :-1] == x[:, -1:]) & (y[:, :-1] == y[:, -1:])).any(-1)
