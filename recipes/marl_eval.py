"""Evaluation results in the JSON layout that marl-eval reads and BenchMARL writes
(``<run>/marl_eval.json``), so a run's figures can be set beside BenchMARL's tables and
aggregated with marl-eval's tools::

    {environment: {task: {algorithm: {"seed_<seed>": {
        "step_<k>": {"step_count": frames, "return": [one value per episode],
                     "<group>_return": [...], ...},
        "absolute_metrics": {"return": [the largest value so far], ...}}}}}}

One ``step_<k>`` per evaluation (``k`` from 0; ``eval_interval_frames`` sets how often, the
final evaluation is the last); ``step_count`` is the frames trained when it ran. Each
episode's ``<group>_return`` is the sum of an agent's rewards over the episode averaged over
the group's agents, and ``return`` the mean over the groups, as BenchMARL computes them;
``absolute_metrics`` keeps each metric's largest episode value over the run, as BenchMARL's
files do. MPE runs are filed under environment ``vmas`` (their transitions are VMAS's) and
task the scenario, others under ``torchrl_warp`` and the env's name; the algorithm is
``algo.name`` unless ``marl_eval_algorithm`` names it (two runs of one algorithm in one
merged file need different names). A resumed run appends to the file it finds.

Example:
    >>> import tempfile, os, json
    >>> path = os.path.join(tempfile.mkdtemp(), "marl_eval.json")
    >>> log = MarlEvalLog(path, "vmas", "simple_spread", "masac", seed=0)
    >>> log.add(1000, {"agents": [-20.0, -10.0]})
    >>> json.load(open(path))["vmas"]["simple_spread"]["masac"]["seed_0"]["step_0"]
    {'step_count': 1000, 'agents_return': [-20.0, -10.0], 'return': [-20.0, -10.0]}
"""
from __future__ import annotations

import json
import os

__all__ = ["MarlEvalLog", "names"]


def names(cfg) -> tuple[str, str, str]:
    """``(environment, task, algorithm)`` of a run's config, as the file keys them.

    >>> from omegaconf import OmegaConf
    >>> names(OmegaConf.create({"env": {"name": "mpe", "scenario": "simple_tag"}, "algo": {"name": "maddpg"}}))
    ('vmas', 'simple_tag', 'maddpg')
    """
    env = cfg.env.name
    environment, task = ("vmas", cfg.env.scenario) if env == "mpe" else ("torchrl_warp", env)
    return environment, task, cfg.get("marl_eval_algorithm") or cfg.algo.name


class MarlEvalLog:
    """Appends evaluations to ``path`` in marl-eval's layout, rewriting the file after each."""

    def __init__(self, path: str, environment: str, task: str, algorithm: str, seed: int):
        self.path = path
        data = {}
        if os.path.exists(path):
            with open(path) as f:
                data = json.load(f)
        self.data = data
        self.run = (data.setdefault(environment, {}).setdefault(task, {}).setdefault(algorithm, {})
                    .setdefault(f"seed_{seed}", {}))
        self.run.setdefault("absolute_metrics", {})

    @property
    def evaluations(self) -> int:
        return sum(k.startswith("step_") for k in self.run)

    def add(self, frames: int, group_returns: dict[str, list[float]]) -> None:
        """One evaluation after ``frames`` frames: each group's episode returns (one list per
        group, the same episodes in the same order)."""
        lengths = {len(v) for v in group_returns.values()}
        if len(lengths) != 1:
            raise ValueError(f"every group needs one return per episode, got lengths {sorted(lengths)}")
        metrics = {f"{g}_return": [float(x) for x in v] for g, v in group_returns.items()}
        columns = list(zip(*metrics.values()))
        metrics["return"] = [sum(c) / len(c) for c in columns]
        self.run[f"step_{self.evaluations}"] = {"step_count": int(frames), **metrics}
        best = self.run["absolute_metrics"]
        for name, values in metrics.items():
            if values:
                best[name] = [max(values + best.get(name, []))]
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)
