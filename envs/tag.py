"""Tag (continuous): WarpDrive's benchmark environment, as a TorchRL env.

The kernels (phases, the k-nearest searches) are in :mod:`torchrl_warp.cuda.tag`.

Examples:
    >>> env = TagEnv(num_envs=4, num_taggers=2, num_runners=5, num_other_agents_observed=3)
    >>> env.observation_spec["taggers", "observation"].shape   # 6 + 7 * 3 + 1 features
    torch.Size([4, 2, 28])
    >>> env.action_spec["runners", "action"].shape              # (acceleration, turn) indices
    torch.Size([4, 5, 2])
"""

import math

import numpy as np
import torch
from torchrl.data import MultiCategorical

from torchrl_warp.cuda import tag as kernels
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, Layout
from torchrl_warp.names import NEIGHBOR_SEARCHES
from torchrl_warp.params import Param

__all__ = ["TagEnv", "action_table", "neighbor_search", "NEIGHBOR_SEARCHES", "SCAN_MAX_AGENTS", "SCAN_MAX_K",
           "GRID_MAX_REGISTERS", "GRID_LENGTH_MAX", "TAG_COLORS"]

#: the most acceleration or turn levels (each is an entry of a lookup table)
LEVELS_MAX = 1 << 16
#: ``"auto"`` scans every agent when an env has at most this many agents and each observes
#: at most ``SCAN_MAX_K`` others (on an H200, 10k envs: 110 agents 0.848 -> 0.657 ms per step,
#: 140 agents 1.091 -> 0.903, 190 agents 0.950 -> 0.899; 250 agents and k = 10 slower,
#: docs/benchmarks.md; the CPU backend ~20% faster at 110 agents); the grid otherwise
SCAN_MAX_AGENTS = 192
SCAN_MAX_K = 2
#: registers per thread the grid's CUDA kernels may use (``Layout.max_registers``). ptxas picks
#: 80 on its own; with this cap its code runs faster (H200, 10+990 agents, k = 2: 1000 envs
#: 0.712 -> 0.645 ms per step, 2000 envs 1.303 -> 1.202; 10k x 10+100, k = 10: 2.009 -> 1.988;
#: docs/benchmarks.md)
GRID_MAX_REGISTERS = 112
#: the largest ``grid_length``: squared distances (float32, up to ``2 grid_length**2``) stay finite
GRID_LENGTH_MAX = 1e18


#: ``TagEnv.render``'s colours (floats in [0, 1])
TAG_COLORS = {
    "world": (1.0, 1.0, 1.0), "margin": (0.85, 0.85, 0.85),
    "tagger": (0.85, 0.15, 0.15), "tagger_tick": (0.4, 0.0, 0.0),
    "runner": (0.15, 0.35, 0.85), "runner_tick": (0.0, 0.1, 0.4),
    "tagged": (1.0, 0.6, 0.0), "tagged_tick": (0.5, 0.25, 0.0),
    "out": (0.7, 0.7, 0.7),
}


def action_table(max_value: float, levels: int, min_value: float | None = None) -> torch.Tensor:
    """``[0] + linspace(min_value, max_value, levels)`` (``min_value``: ``-max_value`` if not
    given), the ends rounded to float32 first and the table computed by numpy's ``linspace``
    in float32, as WarpDrive's; index 0 is the no-op.

    >>> action_table(1.0, 3).tolist()
    [0.0, -1.0, 0.0, 1.0]
    """
    low = np.float32(-max_value if min_value is None else min_value)
    table = np.linspace(low, np.float32(max_value), levels)
    return torch.from_numpy(np.insert(table, 0, 0).astype(np.float32))


def neighbor_search(choice: str, num_agents: int, k: int) -> str:
    """The k-nearest search ``TagEnv`` runs: ``"scan"`` or ``"grid"``. ``choice="auto"``: the
    scan up to :data:`SCAN_MAX_AGENTS` agents per env and ``k <=`` :data:`SCAN_MAX_K`, else the grid.

    >>> neighbor_search("auto", 110, 2), neighbor_search("auto", 110, 10), neighbor_search("auto", 1000, 2)
    ('scan', 'grid', 'grid')
    """
    if choice == "auto":
        return "scan" if num_agents <= SCAN_MAX_AGENTS and k <= SCAN_MAX_K else "grid"
    return choice


class TagEnv(WarpEnv):
    """Taggers chase runners on ``[0, grid_length]^2`` (WarpDrive's "tag_continuous").

    Two groups, ``"taggers"`` (agents ``0..num_taggers-1`` in the kernels) and
    ``"runners"``. Each agent picks an acceleration index and a turn index
    (``MultiCategorical([num_acceleration_levels + 1, num_turn_levels + 1])``; index
    0 is the no-op). A runner closer than ``tagging_distance * grid_length`` to its
    nearest tagger is tagged: ``tag_penalty_for_runner`` for it, ``tag_reward_for_tagger``
    for that tagger, and it leaves the game if ``runner_exits_game_after_tagged``
    (its per-agent ``terminated`` flag is set). The episode terminates when no
    runner is left and is truncated after ``episode_length`` steps. A step follows
    WarpDrive's CPU ``TagContinuous.step`` rule for rule, in float32 (checked against it in
    ``tests/test_tag_warpdrive.py``); by default the observation is taken before the
    step's tags, as WarpDrive's (``observe_after_tags=True``: after them). The
    observation layout is documented in :mod:`torchrl_warp.cuda.tag`: WarpDrive's by
    default, or with ``egocentric_observation=True`` positions and velocities in each
    agent's own frame and angles as cosines and sines (what the training recipe uses:
    MAPPO learns Tag with it and barely without, docs/recipes.md).

    Any number of agents works: lanes of a CUDA block stride over agents. Each agent
    observes its ``num_other_agents_observed`` nearest (exactly those a brute-force scan
    would pick by float32 squared distance, ties to the lower index, on every backend).
    ``neighbor_search`` picks how they are found; every choice gives the same result, only
    the speed differs:

    * ``"grid"``: a grid of ``cells_per_side(n) ** 2`` cells per env (about 3 agents per
      cell) rebuilt every step; the search looks at a few cells around the agent
      instead of all ``n`` agents;
    * ``"scan"``: every agent against every other, all lanes of a warp reading the same
      agent at once, the two nearest in registers for ``k <= 2`` (a sorted list in
      thread-private memory above that, much slower);
    * ``"auto"`` (default): the scan for small envs and ``k <= 2`` (WarpDrive's
      benchmark: 10 + 100 agents, k = 2), else the grid (see :data:`SCAN_MAX_AGENTS`);
      ``env.search`` says which one runs.

    The searches' scratch fields (``cell_*``, ``row_count``, ``agent_cell``,
    ``agent_slot`` for the grid, ``scan_x``, ``scan_y`` for the scan) are part of
    ``env.state``; those of the search not used are empty.
    """

    parameters = {
        "num_taggers": Param(10, "agents of the group 'taggers' (kernel indices first)", ge=1),
        "num_runners": Param(100, "agents of the group 'runners'", ge=1),
        "grid_length": Param(20.0, "side of the square world [0, grid_length]^2 (at most 1e18)", gt=0),
        "episode_length": Param(500, "steps before the episode is truncated", ge=1),
        "max_speed": Param(1.0, "speeds are clipped to [0, max_speed]", gt=0),
        "max_acceleration": Param(0.1, "the largest acceleration an action picks", ge=0),
        "min_acceleration": Param(-0.1, "the smallest acceleration an action picks"),
        "max_turn": Param(2.356, "the largest turn an action picks (rad), at most a full circle", ge=0, le=math.tau),
        "min_turn": Param(-2.356, "the smallest turn an action picks (rad), at most a full circle", ge=-math.tau,
                          le=math.tau),
        "num_acceleration_levels": Param(20, "accelerations evenly spaced in [min, max] (plus the no-op index 0)",
                                         ge=1, le=LEVELS_MAX, table=4),
        "num_turn_levels": Param(20, "turns evenly spaced in [min, max] (plus the no-op index 0)", ge=1,
                                 le=LEVELS_MAX, table=4),
        "skill_level_tagger": Param(1.0, "taggers' top speed is max_speed times this", gt=0),
        "skill_level_runner": Param(1.0, "runners' top speed is max_speed times this", gt=0),
        "num_other_agents_observed": Param(10, "k: each agent observes its k nearest others", ge=1),
        "use_full_observation": Param(False, "observe every other agent instead of the k nearest"),
        "neighbor_search": Param("auto", "how the k nearest are found (same result, different speed)",
                                 choices=NEIGHBOR_SEARCHES),
        "egocentric_observation": Param(False, "positions and velocities in each agent's own frame"),
        "tagging_distance": Param(0.02, "a runner this close (times grid_length) to a tagger is tagged", ge=0),
        "tag_reward_for_tagger": Param(10.0, "a tagger's reward per runner it tags"),
        "tag_penalty_for_runner": Param(-10.0, "a runner's reward when it is tagged"),
        "step_penalty_for_tagger": Param(0.0, "each tagger's reward every step it moves"),
        "step_reward_for_runner": Param(0.0, "every runner's reward each step in the game"),
        "edge_hit_penalty": Param(0.0, "reward for hitting the world's edge", le=0),
        "end_of_game_reward_for_runner": Param(1.0, "reward of each runner still in the game after the last step's tags"),
        "runner_exits_game_after_tagged": Param(True, "a tagged runner leaves the game"),
        "observe_after_tags": Param(False, "observe after this step's tags (WarpDrive, the default: before them)"),
    }

    def __init__(self, num_envs: int = 1, device="cpu", *, starting_location_x=None, starting_location_y=None,
                 starting_directions=None, **kwargs):
        """``starting_location_x``, ``starting_location_y`` (both or neither) and
        ``starting_directions``: WarpDrive's fixed start, one value per agent (taggers
        first), that every episode of every env starts from; by default each episode draws
        its own (positions uniform on the square, headings in {0, pi/2, pi, 3 pi/2}).
        The other arguments are :class:`~torchrl_warp.WarpEnv`'s and the parameters."""
        if (starting_location_x is None) != (starting_location_y is None):
            raise ValueError("TagEnv: give starting_location_x and starting_location_y together, or neither")
        self._starting = {"x": starting_location_x, "y": starting_location_y, "direction": starting_directions}
        super().__init__(num_envs, device, **kwargs)

    def _fixed_starts(self) -> dict:
        p, n = self.params, self.num_agents
        given = {k: v for k, v in self._starting.items() if v is not None}
        values = {}
        for k, v in given.items():
            name = "starting_directions" if k == "direction" else f"starting_location_{k}"
            try:
                values[k] = torch.as_tensor(np.asarray(v, dtype=np.float64), dtype=torch.float32)
            except (TypeError, ValueError) as err:
                raise TypeError(f"TagEnv: {name} must be a sequence of {n} numbers, got {v!r}") from err
            if values[k].shape != (n,):
                raise ValueError(f"TagEnv: {name} needs one value per agent ({n}: taggers first), "
                                 f"got shape {list(values[k].shape)}")
            if not bool(torch.isfinite(values[k]).all()):
                raise ValueError(f"TagEnv: {name} holds NaN or infinite values")
            if k != "direction" and not bool(((values[k] >= 0) & (values[k] <= p.grid_length)).all()):
                raise ValueError(f"TagEnv: {name} must lie in [0, grid_length={p.grid_length}]")
        fixed = {}
        if "x" in values:
            fixed["pos"] = torch.stack([values["x"], values["y"]], -1)
        if "direction" in values:
            fixed["direction"] = values["direction"]
        return fixed

    def _check_params(self, p):
        if p.grid_length > GRID_LENGTH_MAX:
            raise ValueError(f"TagEnv: parameter 'grid_length' must be a float in (0, {GRID_LENGTH_MAX:g}] (squared "
                             f"distances, float32, must stay finite), got {p.grid_length!r}")
        n = p.num_taggers + p.num_runners
        if not p.use_full_observation and p.num_other_agents_observed >= n:
            raise ValueError(
                f"TagEnv: num_other_agents_observed (k={p.num_other_agents_observed}) must be "
                f"< the number of agents ({n}); use use_full_observation=True to see all others"
            )

    def _layout(self, p):
        n = p.num_taggers + p.num_runners
        full = p.use_full_observation
        k = n - 1 if full else p.num_other_agents_observed
        search = self.search
        grid = search == "grid"
        # the k-nearest search's grid: G x G cells per env (none without the grid)
        g = kernels.cells_per_side(n) if grid else 1
        cells = g * g if grid else 0
        grid_agents = n if grid else 0
        scanned = n if search == "scan" else 0
        agent = dict(per_agent=True)
        # tuples are phases that run back to back, no barrier between; the done flags (env's
        # and agents') are written once the runners left are counted
        flags = (kernels.end_of_step, kernels.agent_flags, kernels.retire_agent)
        if search == "grid":
            search_phases = (kernels.sum_rows, kernels.start_cells, (kernels.fill_cells,) + flags,
                             kernels.observe_nearest)
            reset = ((kernels.clear_counts, kernels.reset_agent),)
            observe = (kernels.count_cells,) + search_phases
            step = ((kernels.clear_counts, kernels.move), kernels.detect_tags,
                    (kernels.score_tags, kernels.count_cells)) + search_phases
        else:  # the scan, or every other agent observed: the runners count themselves with atomics
            look = kernels.observe_scan if search == "scan" else kernels.observe
            publish = (kernels.publish_position,) if search == "scan" else ()
            reset = ((kernels.clear_counts, kernels.reset_agent),)
            observe = ((kernels.count_runner,) + publish, flags + (look,))
            step = ((kernels.clear_counts, kernels.move), (kernels.detect_tags, kernels.count_runner),
                    (kernels.score_tags,) + publish + flags, look)
        return Layout(
            groups={"taggers": p.num_taggers, "runners": p.num_runners},
            observation_shape=(kernels.observation_size(k, p.egocentric_observation),),
            action_spec=MultiCategorical(
                nvec=[p.num_acceleration_levels + 1, p.num_turn_levels + 1], dtype=torch.int64
            ),
            fields=[
                Field("pos", (2,), **agent),
                Field("direction", **agent),
                Field("speed", **agent),
                Field("acceleration", **agent),
                Field("in_game", dtype=torch.bool, **agent),
                Field("tagged_by", dtype=torch.int32, **agent),
                # runners each tagger tagged this step (atomics); runners left in the game (from
                # the grid, or counted by the runners with atomics under the full observation)
                Field("tag_count", dtype=torch.int32, derived=True, **agent),
                Field("runners_left", dtype=torch.int32, derived=True),
                # scratch space of the k-nearest search: the sorted list of each agent
                Field("neighbor_distance", (0 if full else k,), torch.float32, scratch=True, **agent),
                Field("neighbor_index", (0 if full else k,), torch.int32, scratch=True, **agent),
                # the scan's positions (NaN: out of the game), [E, N] (or [E, 0])
                Field("scan_x", (scanned,), scratch=True),
                Field("scan_y", (scanned,), scratch=True),
                # scratch space of the grid (cuda/tag.py): agents per cell, per row of cells,
                # where each cell's agents begin in cell_agent (+ the total at the end), the
                # agents in the game sorted by cell and their positions, each agent's cell
                # (-1: out of the game) and slot in it
                Field("cell_count", (cells,), torch.int32, scratch=True),
                Field("row_count", (g if grid else 0,), torch.int32, scratch=True),
                Field("cell_start", (cells + (1 if grid else 0),), torch.int32, scratch=True),
                Field("cell_agent", (grid_agents,), torch.int32, scratch=True),
                Field("cell_x", (grid_agents,), scratch=True),
                Field("cell_y", (grid_agents,), scratch=True),
                Field("agent_cell", (grid_agents,), torch.int32, scratch=True),  # [E, N] (or [E, 0]: same ndim)
                Field("agent_slot", (grid_agents,), torch.int32, scratch=True),
            ],
            reset=reset,
            observe=observe,
            step=step,
            agent_done=True,
            # each step writes every agent's observation, reward and flags from the state
            outputs_from_state=True,
            max_registers=GRID_MAX_REGISTERS if grid else None,
            constants={
                "acceleration_actions": action_table(p.max_acceleration, p.num_acceleration_levels,
                                                     p.min_acceleration),
                "turn_actions": action_table(p.max_turn, p.num_turn_levels, p.min_turn),
                "cells_per_side": g,
                # the grid's cell geometry, divided once here (the kernels multiply)
                "cells_per_unit": g / p.grid_length,
                "cell_size": p.grid_length / g,
                "observation_scales": kernels.observation_scales(p.grid_length, p.max_speed, p.episode_length),
            },
        )

    @property
    def search(self) -> str:
        """The k-nearest search the kernels run: ``"grid"``, ``"scan"`` (see ``neighbor_search``),
        or ``"full"`` (``use_full_observation``: every other agent, no search)."""
        p = self.params
        if p.use_full_observation:
            return "full"
        return neighbor_search(p.neighbor_search, p.num_taggers + p.num_runners, p.num_other_agents_observed)

    def render(self, mode: str = "rgb_array", env_index: int = 0, resolution: int = 400) -> np.ndarray:
        """An RGB frame ``[resolution, resolution, 3]`` (uint8) of env ``env_index``: the world
        square (white, in a grey margin), each agent a disc (taggers red, runners blue) with a
        dark tick towards its heading; a runner tagged this step (``tagged_by >= 0``) orange,
        one out of the game grey, under the others. Only that env's state is copied to the
        host. Only ``mode="rgb_array"``: there is no window."""
        from torchrl_warp.render import Canvas, check_render_args

        i = check_render_args(self, mode, env_index, resolution)
        p, state = self.params, self.state
        pos = state.get("pos")[i].detach().cpu().double().numpy()
        heading = state.get("direction")[i].detach().cpu().double().numpy()
        in_game = state.get("in_game")[i].cpu().numpy()
        tagged = state.get("tagged_by")[i].cpu().numpy() >= 0
        side = p.grid_length
        r = side / 80  # 5 pixels at 400: the agents are points, the tagging distance is 2% of the side
        margin = 2 * r
        view = (-margin, side + margin)
        canvas = Canvas(resolution, resolution, view, view, TAG_COLORS["margin"])
        canvas.rectangle(0.0, 0.0, side, side, TAG_COLORS["world"])
        is_tagger = np.arange(len(pos)) < p.num_taggers
        kind = np.where(is_tagger, "tagger", np.where(tagged, "tagged", np.where(in_game, "runner", "out")))
        # out of the game first (under the others), then runners, the tagged, the taggers on top
        for which in ("out", "runner", "tagged", "tagger"):
            tick = TAG_COLORS.get(f"{which}_tick")  # none for those out (at rest, heading 0)
            for a in np.flatnonzero(kind == which):
                canvas.disc(pos[a], r, TAG_COLORS[which])
                if tick is not None:
                    tip = pos[a] + r * np.array([np.cos(heading[a]), np.sin(heading[a])])
                    canvas.line(pos[a], tip, max(r / 2.5, canvas.pixel), tick)
        return canvas.frame()

    @property
    def runners_in_game(self) -> torch.Tensor:
        """Number of runners still in the game, per env (``[num_envs]``)."""
        return self.state["in_game"][:, self.params.num_taggers:].sum(-1)


