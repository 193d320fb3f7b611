"""What every recipe family shares: the envs, observation statistics, evaluation, the run's
clocks and limits, and the run's start and end (config checks, checkpoint to resume, the
summary, learning curve and video).

A family's ``train(cfg, out_dir)`` (recipes/on_policy.py: PPO, MAPPO, IPPO) reads top to
bottom as::

    run = start_run(cfg, out_dir, build_agents)   # checks, env, networks, checkpoint
    ...                                           # its own collection and updates
    return finish_run(run, history, ...)          # checkpoint, evaluation, summary.json

Example:
    >>> from omegaconf import OmegaConf
    >>> make_env(OmegaConf.create({"env": {"name": "cartpole", "params": {}}}), "cpu", 2, seed=0).batch_size
    torch.Size([2])
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable

_IMPORTED = time.perf_counter()  # where /proc is missing, wall time is reported from here

import torch  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictSequential  # noqa: E402
from torchrl.envs.utils import ExplorationType, set_exploration_type  # noqa: E402

from torchrl_warp.capture import nothing_freed_behind  # noqa: E402
from torchrl_warp.envs import AcrobotEnv, CartPoleEnv, MountainCarContinuousEnv, MountainCarEnv, MPEEnv, PendulumEnv, \
    TagEnv, TagGridWorldEnv  # noqa: E402
from torchrl_warp.recipes.checkpoint import load_checkpoint, restore, save_checkpoint  # noqa: E402
from torchrl_warp.recipes.config import check_config, check_env_params, cpu_batch_warning  # noqa: E402
from torchrl_warp.recipes.distributed import Ranks  # noqa: E402
from torchrl_warp.recipes.metrics import plot_learning_curve, tags_per_episode  # noqa: E402
from torchrl_warp.recipes.mpe_scripted import UniformRandom, episode_returns, gap_closed  # noqa: E402
from torchrl_warp.recipes.scripted import Steer  # noqa: E402

#: the run's log (every family's lines, TorchRL's and tensordict's: ``to_the_run_log``)
log = logging.getLogger("torchrl_warp.recipes.train")


def mpe_env(num_envs: int = 1, device="cpu", *, scenario: str = "simple_spread", **kwargs):
    """``MPEEnv(scenario, ...)`` called as the other envs are (``scenario`` a keyword)."""
    return MPEEnv(scenario, num_envs=num_envs, device=device, **kwargs)


ENVS = {"tag": TagEnv, "tag_gridworld": TagGridWorldEnv, "cartpole": CartPoleEnv, "acrobot": AcrobotEnv,
        "mountain_car": MountainCarEnv, "mountain_car_continuous": MountainCarContinuousEnv, "pendulum": PendulumEnv,
        "mpe": mpe_env}


def env_defaults(cfg) -> dict:
    """The env's parameters as its constructor defaults them, for comparing ``env.params`` with a
    checkpoint's: MPE's are its scenario's, with ``MPEEnv``'s own defaults (``max_steps=None``:
    no limit, 0) over the class's.

    >>> from omegaconf import OmegaConf
    >>> env_defaults(OmegaConf.create({"env": {"name": "mpe", "scenario": "simple_spread"}}))["max_steps"]
    0
    """
    if cfg.env.name != "mpe":
        return ENVS[cfg.env.name].defaults
    import importlib
    import inspect

    from torchrl_warp.envs.mpe import SCENARIOS

    importlib.import_module(f"torchrl_warp.envs.{cfg.env.scenario}")  # registers it in SCENARIOS
    signature = inspect.signature(MPEEnv).parameters
    defaults = dict(SCENARIOS[cfg.env.scenario].defaults)
    for name in ("continuous_actions", "categorical_actions"):
        defaults[name] = signature[name].default
    defaults["max_steps"] = signature["max_steps"].default or 0
    return defaults


def key(group, name):
    """TensorDict key of ``name`` for an agent group (``None``: a single-agent env's root)."""
    return name if group is None else (group, name)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def make_env(cfg: DictConfig, device, num_envs: int, seed: int):
    """``num_envs`` envs of ``cfg.env.name`` with ``cfg.env.params`` (MPE: ``cfg.env.scenario``) on
    ``device``, seeded with ``seed``; actions unchecked (``check_actions=False``)."""
    if cfg.env.name not in ENVS:
        raise ValueError(f"unknown env {cfg.env.name!r}; expected one of {sorted(ENVS)}")
    params = OmegaConf.to_container(cfg.env.params)
    if cfg.env.name == "mpe":  # out-of-range continuous actions are clamped in the kernel (check_actions=False)
        params["scenario"] = cfg.env.scenario
    return ENVS[cfg.env.name](num_envs=num_envs, device=device, seed=seed, check_actions=False, **params)


class Standardize(torch.nn.Module):
    """``(x - loc) / scale`` over the last dim, with fixed buffers (saved with the model),
    as one ``x * (1 / scale) + (-loc / scale)``: a single pass over the observations
    (they are the largest tensors of an update: 1.4 GB per minibatch of 32768 Tag frames).

    >>> Standardize(torch.tensor([1.0, 0.0]), torch.tensor([2.0, 1.0]))(torch.tensor([3.0, 5.0]))
    tensor([1., 5.])
    """

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor):
        super().__init__()
        self.register_buffer("inv_scale", 1.0 / scale)
        self.register_buffer("shift", -loc / scale)

    def forward(self, x):
        return torch.addcmul(self.shift, x, self.inv_scale)


def observation_stats(env, groups, steps: int, ranks: Ranks = Ranks()) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature mean and scale of the observations of ``steps`` random-action steps,
    accumulated step by step (a stored rollout of a large batch of envs would not fit
    in memory).

    The scale is the standard deviation, or 1 for features that do not vary in the
    rollout (flags that are constant at the start of an episode): dividing by a tiny
    deviation would blow them up when they do change.
    """
    dim = env.layout.observation_shape[-1]
    total = total_sq = 0.0
    count = 0
    with torch.no_grad():
        td = env.reset()
        for _ in range(steps):
            out, td = env.step_and_maybe_reset(env.rand_action(td))
            obs = torch.cat([out["next", key(g, "observation")].reshape(-1, dim) for g in groups])
            obs = obs.double()
            total, total_sq, count = total + obs.sum(0), total_sq + obs.square().sum(0), count + obs.shape[0]
    return _loc_and_scale(total, total_sq, count, ranks)


def _loc_and_scale(total, total_sq, count: int, ranks: Ranks) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and scale (1 where the deviation is tiny) from float64 sums over ``count`` rows,
    summed over every rank's rollout first (torchrun: every rank normalises alike)."""
    if ranks.distributed:
        counts = torch.tensor(float(count), dtype=torch.float64, device=total.device)
        ranks.sum_(total, total_sq, counts)
        count = counts.item()
    loc = total / count
    std = (total_sq / count - loc.square()).clamp_min(0).mul(count / max(count - 1, 1)).sqrt()
    loc, std = loc.float(), std.float()
    return loc, torch.where(std > 1e-3, std, torch.ones_like(std))


def observation_stats_by_group(env, groups, steps: int, ranks: Ranks = Ranks()) -> dict:
    """:func:`observation_stats` of each group's own observations (MPE: groups whose
    observations differ in size and meaning, simple_tag's adversaries and good agents):
    ``{group: (loc, scale)}``, from one random-action rollout."""
    total = {g: 0.0 for g in groups}
    total_sq = {g: 0.0 for g in groups}
    count = {g: 0 for g in groups}
    with torch.no_grad():
        td = env.reset()
        for _ in range(steps):
            out, td = env.step_and_maybe_reset(env.rand_action(td))
            for g in groups:
                obs = out["next", key(g, "observation")]
                obs = obs.reshape(-1, obs.shape[-1]).double()
                total[g], total_sq[g] = total[g] + obs.sum(0), total_sq[g] + obs.square().sum(0)
                count[g] += obs.shape[0]
    return {g: _loc_and_scale(total[g], total_sq[g], count[g], ranks) for g in groups}


def with_group_done_flags(batch, groups):
    """``batch`` with ``("next", group, "done" / "terminated")`` for groups that lack them: MPE's
    done flags are the env's (``VmasEnv``'s, at the root), the multi-agent losses read one per
    agent, so the root's are expanded over the group's agents (a view, no copy). Envs with
    their own per-group flags (Tag) are left as they are.

    >>> from tensordict import TensorDict
    >>> td = TensorDict({"next": {"done": torch.zeros(2, 5, 1, dtype=torch.bool),
    ...                           "agents": TensorDict({"reward": torch.zeros(2, 5, 3, 1)}, [2, 5, 3])}}, [2, 5])
    >>> with_group_done_flags(td, ["agents"])["next", "agents", "done"].shape
    torch.Size([2, 5, 3, 1])
    """
    for g in groups:
        if g is None:
            continue
        shape = batch.get(("next", g, "reward")).shape
        for flag in ("done", "terminated"):
            root = batch.get(("next", flag), None)
            if root is not None and batch.get(("next", g, flag), None) is None:
                batch.set(("next", g, flag), root.unsqueeze(-1).expand(shape))
    return batch


def first_episode(td) -> torch.Tensor:
    """``[num_envs, T]``: True at the steps of each env's first episode in a rollout ``td``.

    >>> from tensordict import TensorDict
    >>> done = torch.tensor([[False, True, False], [False, False, False]]).unsqueeze(-1)
    >>> first_episode(TensorDict({"next": {"done": done}}, [2, 3]))
    tensor([[ True,  True, False],
            [ True,  True,  True]])
    """
    done = td["next", "done"].squeeze(-1)
    return (done.cumsum(1) - done.long()) == 0


def tag_rate_and_steps(td) -> tuple[float, float]:
    """Of each env's first episode in a rollout ``td``: the fraction that ended in a tag
    (``terminated``, not at the time limit), and the mean number of steps.

    >>> from tensordict import TensorDict
    >>> done = torch.tensor([[False, True, True], [False, False, True]]).unsqueeze(-1)
    >>> terminated = torch.tensor([[False, True, False], [False, False, False]]).unsqueeze(-1)
    >>> tag_rate_and_steps(TensorDict({"next": {"done": done, "terminated": terminated}}, [2, 3]))
    (0.5, 2.5)
    """
    first = first_episode(td)
    tagged = (td["next", "terminated"].squeeze(-1) & first).any(1)
    return tagged.float().mean().item(), first.sum(1).float().mean().item()


@torch.no_grad()
def evaluate(cfg, agents, device) -> dict:
    """Evaluation on fresh envs: mean return of one episode per env, and for Tag tags per episode;
    ``episode_returns``: each group's return of every env's episode (:mod:`.marl_eval`'s lists).

    The single-agent envs' policies act greedily; Tag's policies sample (a greedy Tag policy is a
    different, worse strategy than the one trained). MPE: :func:`evaluate_mpe`.
    """
    if cfg.env.name == "mpe":
        return evaluate_mpe(cfg, agents, device)
    env = make_env(cfg, device, cfg.eval_envs, seed=cfg.seed + 10_000)
    groups = list(agents)
    tag_like = cfg.env.name in ("tag", "tag_gridworld")
    steps = env.params.episode_length if tag_like else env.params.max_steps
    trained = TensorDictSequential(*[agents[g].actor for g in groups])
    mode = ExplorationType.RANDOM if tag_like else ExplorationType.DETERMINISTIC
    with set_exploration_type(mode):
        td = env.rollout(steps, trained, break_when_any_done=False)
    result, episodes = {}, {}
    first = first_episode(td)  # one episode per env: count rewards up to the first done
    for g in groups:
        reward = td["next", key(g, "reward")]
        mask = first.reshape(first.shape + (1,) * (reward.dim() - 2))
        episodes[g or "agent"] = (reward * mask).sum(1).reshape(env.num_envs, -1).mean(-1)  # mean over agents
        result[f"eval_return/{g or 'agent'}"] = episodes[g or "agent"].mean().item()
    result["episode_returns"] = {g: r.tolist() for g, r in episodes.items()}

    def random_taggers(tensordict):  # the baseline of both Tags: uniform-random taggers
        return tensordict.set(("taggers", "action"), env.full_action_spec["taggers", "action"].rand())

    if cfg.env.name == "tag_gridworld":
        # how often and how fast the taggers tag in each env's first episode: the trained
        # taggers against the trained runner, and uniform-random taggers against it
        result["eval_tag_rate"], result["eval_steps_to_tag"] = tag_rate_and_steps(td)
        env.set_seed(cfg.seed + 10_000)
        with set_exploration_type(mode):
            td = env.rollout(steps, TensorDictSequential(agents["runners"].actor, random_taggers),
                             break_when_any_done=False)
        result["eval_tag_rate_random_taggers"], result["eval_steps_to_tag_random_taggers"] = tag_rate_and_steps(td)
    if cfg.env.name == "tag":
        result["eval_tags_per_episode"] = tags_per_episode(env, td)

        # the baseline, uniform-random taggers against the trained runners, and yardsticks
        # (recipes/scripted.py): a scripted chaser against the trained runners, the trained
        # taggers against scripted fleeing runners
        for name, trained_group, other in (("random_taggers", "runners", random_taggers),
                                           ("chasing_taggers", "runners", Steer(env, "taggers", "runners")),
                                           ("vs_fleeing_runners", "taggers",
                                            Steer(env, "runners", "taggers", away=True))):
            env.set_seed(cfg.seed + 10_000)
            with set_exploration_type(mode):
                td = env.rollout(steps, TensorDictSequential(agents[trained_group].actor, other),
                                 break_when_any_done=False)
            result[f"eval_tags_per_episode_{name}"] = tags_per_episode(env, td)
        result["eval_tag_ratio"] = result["eval_tags_per_episode"] / max(result["eval_tags_per_episode_random_taggers"], 1e-9)
    return result


@torch.no_grad()
def evaluate_mpe(cfg, agents, device) -> dict:
    """MPE evaluation on ``eval_envs`` fresh envs, one episode (``max_steps``) each, every
    rollout from the same seed (the same initial positions): each group's mean episode
    return (mean over its agents and the envs)

    - ``eval_return/<group>``: the trained policies, sampling (as trained);
    - ``eval_return_deterministic/<group>``: the trained policies' means (TanhNormal: the
      tanh of its location; categorical: the most likely action);
    - with several groups, ``eval_return_random_<g>/<group>``: group ``g`` uniform-random
      against the others' trained policies (simple_tag: do the trained adversaries tag more
      than random ones, against the same trained good agents?);
    - simple_spread: ``eval_return_random/<group>`` (uniform-random agents) and
      ``eval_return_scripted/<group>`` (``GoToLandmark``: agent i straight to landmark i),
      and ``eval_gap_closed[_deterministic]/<group>``: the fraction of the random ->
      scripted gap the trained policy closes;
    - ``episode_returns``: each group's return of every env's episode (the trained policies,
      sampling: :mod:`.marl_eval`'s lists).
    """
    env = make_env(cfg, device, cfg.eval_envs, seed=cfg.seed + 10_000)
    groups = list(agents)
    steps = env.params.max_steps

    def episodes(policy, mode=ExplorationType.RANDOM):
        env.set_seed(cfg.seed + 10_000)
        with set_exploration_type(mode):
            return episode_returns(env, policy, steps)

    def returns(policy, mode=ExplorationType.RANDOM):
        return {g: r.mean().item() for g, r in episodes(policy, mode).items()}

    trained = TensorDictSequential(*[agents[g].actor for g in groups])
    result = {}
    for suffix, mode in (("", ExplorationType.RANDOM), ("_deterministic", ExplorationType.DETERMINISTIC)):
        by_episode = episodes(trained, mode)
        for g, r in by_episode.items():
            result[f"eval_return{suffix}/{g}"] = r.mean().item()
        if mode == ExplorationType.RANDOM:
            result["episode_returns"] = {g: r.tolist() for g, r in by_episode.items()}
    if len(groups) > 1:
        for g in groups:  # (in a TensorDictSequential: rollout would read a lambda's argument names as keys)
            mixed = TensorDictSequential(UniformRandom(env, [g]), *[agents[h].actor for h in groups if h != g])
            result.update({f"eval_return_random_{g}/{h}": value for h, value in returns(mixed).items()})
    if cfg.env.scenario == "simple_spread":
        from torchrl_warp.envs.simple_spread import GoToLandmark

        torch.manual_seed(cfg.seed + 10_000)
        for name, policy in (("random", UniformRandom(env)), ("scripted", GoToLandmark(env))):
            result.update({f"eval_return_{name}/{g}": value for g, value in returns(policy).items()})
        for suffix in ("", "_deterministic"):
            for g in groups:
                result[f"eval_gap_closed{suffix}/{g}"] = gap_closed(
                    result[f"eval_return{suffix}/{g}"], result[f"eval_return_random/{g}"],
                    result[f"eval_return_scripted/{g}"])
    return result


def peak_memory_gib(device) -> float:
    """The most memory this process has held: on a GPU, what torch's allocator gave out
    (``torch.cuda.max_memory_allocated``); on the CPU, the peak resident set (``ru_maxrss``).

    >>> peak_memory_gib(torch.device("cpu")) > 0
    True
    """
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


def whole_batches(frames: int, frames_per_batch: int) -> int:
    """``frames`` rounded up to whole batches: what the collector gathers for it.

    >>> whole_batches(3_000_000, 32_768), whole_batches(512, 256)
    (3014656, 512)
    """
    return -(-frames // frames_per_batch) * frames_per_batch


def _process_start() -> float:
    """The ``time.perf_counter()`` reading at this process's start (Linux: ``/proc/self/stat``,
    to the kernel's clock tick), so the package's imports (torch, TorchRL: seconds) count
    too; elsewhere this module's import."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return min(time.perf_counter() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK")), _IMPORTED)
    except (OSError, ValueError, IndexError):
        return _IMPORTED


_LAUNCHED = _process_start()


def seconds_since_launch() -> float:
    """Wall seconds since this Python process started (see :func:`_process_start`); one
    clock (``perf_counter``) for every reading, so time spans add up.

    >>> 0.0 < seconds_since_launch() < 24 * 3600
    True
    """
    return time.perf_counter() - _LAUNCHED


def annealed(frames_before: int, total_frames: int) -> float:
    """The fraction of the initial lr left after ``frames_before`` frames: linear to 0.

    >>> annealed(0, 100), annealed(75, 100), annealed(120, 100)
    (1.0, 0.25, 0.0)
    """
    return max(0.0, 1.0 - frames_before / total_frames)


def set_lr(optimizer, lr: float) -> None:
    """Set every group's lr; a tensor lr (a graph-captured step's) is filled in place."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


class Stopwatch:
    """Seconds between laps, with the device's queued work finished at each lap."""

    def __init__(self, device):
        self.device = device
        self.last = time.perf_counter()

    def pause(self, seconds: float) -> None:
        """Leave ``seconds`` (an evaluation between laps) out of the current lap."""
        self.last += seconds

    def lap(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        return seconds


class TimeLimit:
    """``time_limit_s`` seconds of training (0: none) from its creation, checked after every
    gradient step: a run stops within one step of the limit (under torchrun with several
    ranks, at the end of the batch, every rank at the same one). A batch's collection is not
    cut short.

    >>> limit = TimeLimit(0.0)
    >>> limit.reached(), limit.hit
    (False, False)
    """

    def __init__(self, seconds: float, ranks: Ranks = Ranks(), device=None):
        self.seconds, self.ranks, self.device = seconds, ranks, device
        self.start = time.perf_counter()
        self.hit, self.batches = False, 0

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def pause(self, seconds: float) -> None:
        """Leave ``seconds`` (an evaluation during training) out of the training's time."""
        self.start += seconds

    def reached(self, batch_end: bool = False) -> bool:
        """Whether the limit has passed (on any rank): the run stops after this gradient step.
        With several ranks it is asked at a batch's end only: agreeing is an all-reduce and a
        host sync, which after every gradient step would stall each rank's queue of work."""
        if self.seconds and not self.hit and (batch_end or not self.ranks.distributed):
            self.hit = self.ranks.any(self.elapsed() > self.seconds, self.device)
        return self.hit

    def check_collection(self, collect_s: float) -> None:
        """Call after each collection: says so when the first one alone outlasted the limit."""
        self.batches += 1
        if self.batches == 1 and self.seconds and self.elapsed() > self.seconds:
            log.warning("time limit of %g s passed while collecting the first batch (%.1f s; a collection is not "
                        "cut short): one gradient step, then the run stops; for shorter batches lower env.num_envs "
                        "or env.steps_per_batch", self.seconds, collect_s)

    def say_stopped(self, iteration: int, steps_done: int, steps_per_update: int) -> None:
        log.info("time limit of %g s reached after %.1f s of training, at gradient step %d of %d of iteration %d: "
                 "stopping", self.seconds, self.elapsed(), steps_done, steps_per_update, iteration)


class IterationProfiler:
    """Profiles one training iteration (its collection, then its update) with torch.profiler.

    Writes the ops that took the most device time and host time to ``profile.txt``.
    ``iteration`` is 1-based; 0 profiles nothing. Call :meth:`step` after each iteration.
    """

    def __init__(self, iteration: int, done_iterations: int, device, out_dir: str):
        self.device, self.out_dir, self.prof = device, out_dir, None
        self.wait = iteration - done_iterations - 1 if iteration > done_iterations else -1
        if self.wait == 0:
            self._start()

    def step(self) -> None:
        if self.prof is not None:
            self._stop()
        self.wait -= 1
        if self.wait == 0:
            self._start()

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        self.prof = profile(activities=activities)
        self.prof.__enter__()

    def _stop(self) -> None:
        self.prof.__exit__(None, None, None)
        averages = self.prof.key_averages()
        device_sort = "cuda_time_total" if self.device.type == "cuda" else "cpu_time_total"
        with open(os.path.join(self.out_dir, "profile.txt"), "w") as f:
            f.write(averages.table(sort_by=device_sort, row_limit=30) + "\n")
            f.write(averages.table(sort_by="self_cpu_time_total", row_limit=30) + "\n")
        self.prof = None


def to_the_run_log(*names: str) -> None:
    """Libraries' loggers (TorchRL's and tensordict's have console handlers of their own, TorchRL's
    in colour codes) through the run's handlers instead: Hydra's console line format and
    ``train.log``, and above the progress bar while it runs (``logging_redirect_tqdm``). Each
    keeps the level its handlers let through (``RL_LOGGING_LEVEL`` still applies)."""
    for name in names:
        library = logging.getLogger(name)
        levels = [library.level] + [h.level for h in library.handlers]
        for handler in list(library.handlers):
            library.removeHandler(handler)
        library.setLevel(max(levels))
        library.propagate = True


@dataclass
class Run:
    """A run's setup as :func:`start_run` leaves it for a family's loop; the loop advances
    ``frames_done`` and ``iteration`` and calls :meth:`started` before its first batch."""
    cfg: DictConfig
    out_dir: str
    ranks: Ranks
    device: torch.device
    env: Any
    groups: list
    agents: torch.nn.ModuleDict
    optimizer: torch.optim.Optimizer
    frames_per_batch: int  # of each rank
    total_frames: int  # of all ranks, whole batches
    frames_done: int = 0
    iteration: int = 0
    frames_at_start: int = 0
    imports_seconds: float = 0.0
    setup_seconds: float = 0.0
    train_start: float = 0.0
    history: list = field(default_factory=list)
    marl_eval: Any = None  # marl_eval.json (recipes/marl_eval.py), from the first evaluation
    extra_state: Callable | None = None  # () -> a family's own checkpoint state (replay: the buffer)
    resumed_state: dict = field(default_factory=dict)  # that state as the resumed checkpoint holds it

    @property
    def agents_by_group(self) -> dict:
        """``{group: agent}`` (``None``: a single-agent env's one agent, ``agents["agent"]``)."""
        return {g: self.agents[g or "agent"] for g in self.groups}

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.out_dir, "checkpoint.pt")

    def started(self) -> None:
        """Call when setup ends (envs, kernels compiled, networks, collector): the clock of
        ``train_seconds`` and ``agent_steps_per_s`` starts here."""
        self.train_start = time.perf_counter()
        self.setup_seconds = seconds_since_launch() - self.imports_seconds

    def agent_steps_per_s(self) -> float:
        return (self.frames_done - self.frames_at_start) * self.env.num_agents / (time.perf_counter() - self.train_start)

    def save_checkpoint(self) -> None:
        save_checkpoint(self.checkpoint_path, self.agents, self.optimizer, self.frames_done, self.iteration, self.cfg,
                        self.extra_state() if self.extra_state else None)

    def record(self, row: dict, logger, pbar, frames_before: int, clocks=()) -> None:
        """End an iteration (every family's): ``row`` into the history and the logger, the
        progress bar, a checkpoint every ``checkpoint_every`` iterations, and every
        ``eval_interval_frames`` frames an evaluation (:meth:`evaluate_between`), whose seconds
        are kept off ``train_seconds`` and off ``clocks`` (a :class:`Stopwatch`, a
        :class:`TimeLimit`: anything with ``pause(seconds)``)."""
        cfg = self.cfg
        self.history.append(row)
        if logger is not None:
            for name, value in row.items():
                if name != "frames":
                    logger.log_scalar(name, value, step=self.frames_done)
        pbar.update(self.frames_done - frames_before)
        pbar.set_postfix({k: f"{v:.3g}" for k, v in row.items() if k.startswith("return/")})
        if self.iteration % cfg.checkpoint_every == 0 and self.ranks.is_main:
            self.save_checkpoint()
        every = cfg.get("eval_interval_frames", 0)
        if every and self.frames_done // every > frames_before // every and self.frames_done < self.total_frames:
            seconds = self.evaluate_between(logger)
            self.train_start += seconds
            for clock in clocks:
                clock.pause(seconds)

    def evaluate_between(self, logger=None) -> float:
        """An evaluation during training (rank 0's; the other ranks wait for it): its metrics
        logged as ``eval/<name>`` at the frames done, its episodes into ``marl_eval.json``.
        Training's CPU random stream is left as it was. Returns its seconds."""
        start = time.perf_counter()
        if self.ranks.is_main:
            with torch.random.fork_rng(devices=[]):
                evaluation = evaluate(self.cfg, self.agents_by_group, self.device)
            self.add_evaluation(evaluation)
            log.info("evaluation at %d frames: %s", self.frames_done, ", ".join(
                f"{k} {v:.4g}" for k, v in evaluation.items() if k.startswith(("eval_return/", "eval_gap_closed/"))))
            if logger is not None:
                for name, value in evaluation.items():
                    logger.log_scalar(f"eval/{name}", value, step=self.frames_done)
        if self.ranks.distributed:
            self.ranks.any(False, self.device)  # every rank waits here for rank 0's evaluation
        return time.perf_counter() - start

    def add_evaluation(self, evaluation: dict) -> None:
        """Takes ``episode_returns`` out of :func:`evaluate`'s result into ``marl_eval.json``."""
        episodes = evaluation.pop("episode_returns")
        if self.marl_eval is None:
            from torchrl_warp.recipes.marl_eval import MarlEvalLog, names

            path = os.path.join(self.out_dir, "marl_eval.json")
            before = os.path.join(os.path.dirname(self.cfg.resume), "marl_eval.json") if self.cfg.resume else None
            if before and not os.path.exists(path) and os.path.exists(before):  # a resumed run continues its file
                shutil.copyfile(before, path)
            self.marl_eval = MarlEvalLog(path, *names(self.cfg), seed=self.cfg.seed)
        self.marl_eval.add(self.frames_done, episodes)


def start_run(cfg: DictConfig, out_dir: str, build_agents: Callable, make_optimizer: Callable,
              obs_stats_steps: int | None = None) -> Run | dict:
    """Check ``cfg`` (and the checkpoint ``cfg.resume`` names) before any work, then build the
    run: torchrun's ranks, the device, the seeded env, observation statistics
    (``algo.obs_norm``), the networks ``build_agents(cfg, env, groups, device, obs_stats)``
    (a ``ModuleDict`` by group name, each with an ``actor``) and their optimizer
    ``make_optimizer(cfg, agents, device, ranks)``, restored from the checkpoint and broadcast
    from rank 0. Returns the summary instead when the checkpoint has already trained
    ``env.total_frames``."""
    imports_seconds = seconds_since_launch()  # Python, torch, TorchRL, Numba, Hydra's config
    ranks = Ranks.from_environment()  # torchrun's ranks (recipes/distributed.py), or this process alone
    if not ranks.is_main:
        log.setLevel(logging.WARNING)  # rank 0 reports the run
    log.info("run directory: %s", out_dir)
    check_config(cfg)  # every key known, every value in its range, the algo fits the env
    check_env_params(cfg.env, ENVS)  # env.params: names the env takes
    # tensors and plain data, fitting cfg (env.params compared as the env resolves them)
    ckpt = load_checkpoint(cfg.resume, cfg, env_defaults(cfg)) if cfg.resume else None
    frames_per_batch = cfg.env.num_envs * cfg.env.steps_per_batch  # of each rank
    total_frames = whole_batches(cfg.env.total_frames, frames_per_batch * ranks.world)  # of all ranks
    if total_frames != cfg.env.total_frames:
        log.info("env.total_frames=%d rounded up to %d: whole batches of %d frames (env.num_envs x "
                 "env.steps_per_batch%s)", cfg.env.total_frames, total_frames, frames_per_batch * ranks.world,
                 f" x {ranks.world} ranks" if ranks.distributed else "")
    if ckpt is not None and ckpt["frames"] >= total_frames:
        log.info("nothing to do: %s has already trained %d of %d frames (raise env.total_frames to "
                 "train on)", cfg.resume, ckpt["frames"], total_frames)
        return {"frames": ckpt["frames"], "frames_this_run": 0, "finished_before": True}
    device = ranks.start(pick_device(cfg.device))  # a rank's own GPU (cuda:<local rank>) under torchrun
    if ranks.distributed:
        log.info("%d ranks (torchrun): %d envs each, gradients averaged over the ranks every step",
                 ranks.world, cfg.env.num_envs)
    torch.manual_seed(cfg.seed)
    torch.set_float32_matmul_precision(cfg.algo.matmul_precision.value)
    env = make_env(cfg, device, cfg.env.num_envs, cfg.seed + ranks.rank)
    groups = list(env.layout.groups) if env.layout.groups else [None]
    if device.type == "cpu" and (advice := cpu_batch_warning(cfg.env.num_envs, cfg.env.steps_per_batch,
                                                             env.num_agents, cfg.algo.minibatch_size)):
        log.warning(advice)
    # with obs_norm the stats are buffers of the networks: a resumed run loads them from the checkpoint
    # (MPE: each group's own, its observations its own kind; Tag: one set for both groups)
    obs_stats = None
    if cfg.algo.obs_norm:
        steps = obs_stats_steps or cfg.env.steps_per_batch
        if cfg.env.name == "mpe":
            obs_stats = observation_stats_by_group(env, groups, steps, ranks)
        else:
            shared = observation_stats(env, groups, steps, ranks)
            obs_stats = {g: shared for g in groups}
    agents = build_agents(cfg, env, groups, device, obs_stats)
    optimizer = make_optimizer(cfg, agents, device, ranks)
    run = Run(cfg, out_dir, ranks, device, env, groups, agents, optimizer, frames_per_batch, total_frames,
              imports_seconds=imports_seconds)
    if ckpt is not None:  # the optimizer's moments from the checkpoint, its options this run's (device, graphs)
        run.frames_done, run.iteration = restore(ckpt, cfg.resume, agents, optimizer)
        run.resumed_state = ckpt.get("family", {})
    ranks.broadcast_(agents)  # every rank starts from rank 0's parameters
    run.frames_at_start = run.frames_done  # the figures count this process's frames (all ranks')
    return run


def finish_run(run: Run, time_limit_hit: bool, extra: dict | None = None) -> dict:
    """End ``run``: the last checkpoint, :func:`evaluate`, ``summary.json`` (``extra`` added to
    it), ``learning_curve.png`` and, with ``cfg.video``, ``video.gif``; rank 0 alone writes.
    Returns the summary (another rank: its rank, frames and whether its parameters agree)."""
    cfg, ranks, device = run.cfg, run.ranks, run.device
    train_seconds = time.perf_counter() - run.train_start
    training_peak_gib = peak_memory_gib(device)
    frames_this_run = run.frames_done - run.frames_at_start
    ranks_agree = ranks.parameters_agree(run.agents)  # averaged gradients kept every rank's parameters equal
    if not ranks.is_main:  # rank 0 evaluates and writes the run
        ranks.stop()
        return {"rank": ranks.rank, "frames": run.frames_done, "ranks_agree": ranks_agree}
    run.save_checkpoint()
    eval_start = time.perf_counter()
    evaluation = evaluate(cfg, run.agents_by_group, device)
    run.add_evaluation(evaluation)
    agent_steps_per_frame = run.env.num_agents
    summary = {
        "env": cfg.env.name, **({"scenario": cfg.env.scenario} if cfg.env.name == "mpe" else {}),
        "algo": cfg.algo.name, "device": str(device), "frames": run.frames_done, "frames_this_run": frames_this_run,
        "agent_steps": frames_this_run * agent_steps_per_frame, "train_seconds": train_seconds,
        "time_limit_reached": time_limit_hit,
        "agent_steps_per_s": frames_this_run * agent_steps_per_frame / train_seconds,
        **(extra or {}), "peak_memory_gib": training_peak_gib,
        "final": run.history[-1] if run.history else {}, **evaluation,
        **({"ranks": ranks.world, "ranks_agree": ranks_agree} if ranks.distributed else {}),
        # where the wall time went: launch -> imports -> setup -> training -> evaluation
        "imports_seconds": run.imports_seconds, "setup_seconds": run.setup_seconds,
        "eval_seconds": time.perf_counter() - eval_start, "wall_seconds_since_launch": seconds_since_launch(),
    }
    env_title = f"mpe {cfg.env.scenario}" if cfg.env.name == "mpe" else cfg.env.name
    plot_learning_curve(run.history, os.path.join(run.out_dir, "learning_curve.png"),
                        title=f"{env_title} / {cfg.algo.name}")
    with open(os.path.join(run.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "final"}, indent=1))
    log.info("run directory: %s (checkpoint.pt, summary.json, marl_eval.json, learning_curve.png, %s logs)",
             run.out_dir, cfg.logger)
    if cfg.video is True or (cfg.video == "auto" and device.type == "cuda"):  # recipes/play.py's video
        from torchrl_warp.recipes.play import record

        video = record(cfg, run.agents_by_group, device, os.path.join(run.out_dir, "video.gif"))
        log.info("video.gif: %d frames of env 0 (python -m torchrl_warp.recipes.play checkpoint=%s for more)",
                 video["frames"], run.checkpoint_path)
    ranks.stop()
    return summary


class GradientStep:
    """One gradient step on a minibatch, every family's: the ``trained`` groups' losses (each
    agent's ``loss_value``, summed: TorchRL's actor losses read the critics through detached
    parameters, so one backward gives each network its own loss's gradient), backward,
    gradients averaged over torchrun's ranks, clipped to ``algo.max_grad_norm``, one optimizer
    step, then ``then()`` if given (the replay families' soft target updates: device work that
    joins the step's graph). Returns the losses' parts, detached, by name
    (``loss_objective/<group>``, ...).

    ``graphed`` (``algo.cudagraph_update``, CUDA): the step is captured once as a CUDA graph
    (tensordict's ``CudaGraphModule``, after two eager steps on a side stream) and replayed: the
    host then queues one graph per step instead of the hundreds of kernels of a loss, its
    backward and the optimizer, each with its Python overhead. The minibatch is copied into
    the graph's input buffers, so it must have the same keys and shapes every step. The
    recipes run it eagerly under torchrun with several ranks (tests/nccl_graphed_update.py
    checks a captured NCCL all-reduce on one GPU; it has not been run on several).
    """

    def __init__(self, trained: dict, optimizer, algo, amp, graphed: bool, device, ranks: Ranks = Ranks(),
                 then: Callable | None = None):
        self.trained, self.optimizer, self.ranks, self.amp, self.then = trained, optimizer, ranks, amp, then
        self.params = [p for agent in trained.values() for p in agent.parameters() if p.requires_grad]
        self.max_grad_norm = algo.max_grad_norm
        self.graphed, self._device = graphed, torch.device(device)
        self._step = self._eager
        if graphed:
            from tensordict.nn import CudaGraphModule

            self._step = CudaGraphModule(self._eager, in_keys=[], out_keys=[], warmup=2, device=device)

    def __call__(self, minibatch) -> TensorDict:
        if not self.graphed:
            return self._step(minibatch)
        with nothing_freed_behind(self._device):  # the call that captures must not meet a free
            return self._step(minibatch)

    def _eager(self, minibatch) -> TensorDict:
        total, losses = 0.0, {}
        with self.amp:
            for g, agent in self.trained.items():
                loss, parts = agent.loss_value(minibatch)
                total = total + loss
                losses.update({f"{k}/{g or 'agent'}": v for k, v in parts.items()})
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        self.ranks.average_gradients_(self.params)  # torchrun: the mean of the ranks' gradients
        torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        self.optimizer.step()
        if self.then is not None:  # device work after the optimizer's step, in the same graph
            self.then()
        return TensorDict(losses, batch_size=[])
