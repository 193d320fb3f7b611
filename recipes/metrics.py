"""Training metrics of the recipes: episode returns, Tag's tags, loggers, the learning-curve plot.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> tracker = EpisodeTracker([None], num_envs=2, device="cpu")
    >>> batch = TensorDict({"next": {"reward": torch.ones(2, 3, 1),
    ...                              "done": torch.tensor([[[False], [True], [False]]] * 2)}}, [2, 3])
    >>> tracker.update(batch)
    >>> tracker.summary()["return/agent"]
    2.0
"""
from __future__ import annotations

import math

import torch

__all__ = ["EpisodeTracker", "count_tags", "tags_per_episode", "make_logger", "plot_learning_curve"]


def count_tags(env, td) -> int:
    """Runners tagged in ``td`` (a tag gives the runner the tag penalty)."""
    return (td["next", "runners", "reward"] <= env.params.tag_penalty_for_runner / 2).sum().item()


def tags_per_episode(env, td) -> float:
    """Runners tagged per env in a rollout ``td`` of one episode length of steps (an env
    whose runners are all tagged starts over, so this can exceed the number of runners)."""
    return count_tags(env, td) / env.num_envs


class EpisodeTracker:
    """Returns of finished episodes, per agent group (mean over the group's agents).

    Keeps a running return per env across batches; no host sync until ``summary()``.
    """

    def __init__(self, groups, num_envs: int, device):
        self.groups = list(groups)
        self.running = {g: torch.zeros(num_envs, device=device) for g in self.groups}
        self.finished = {g: torch.zeros((), device=device) for g in self.groups}
        self.count = torch.zeros((), device=device)

    def update(self, batch) -> None:
        done = batch["next", "done"].squeeze(-1)  # [E, T]
        for g in self.groups:
            reward = batch["next", "reward" if g is None else (g, "reward")]
            reward = reward.squeeze(-1) if g is None else reward.squeeze(-1).mean(-1)  # [E, T]
            running = self.running[g]
            for t in range(done.shape[1]):
                running = running + reward[:, t]
                self.finished[g] += (running * done[:, t]).sum()
                running = running * ~done[:, t]
            self.running[g] = running
        self.count += done.sum()

    def summary(self) -> dict:
        """Mean return of the episodes finished since the last call (NaN if none), and their count."""
        n = self.count.item()
        out = {f"return/{g or 'agent'}": (self.finished[g].item() / n if n else math.nan) for g in self.groups}
        out["episodes"] = n
        for g in self.groups:
            self.finished[g].zero_()
        self.count.zero_()
        return out


def make_logger(kind: str, out_dir: str):
    """A TorchRL logger writing under ``out_dir/train`` (``kind``: csv, tensorboard or none)."""
    if kind == "none":
        return None
    if kind == "csv":
        from torchrl.record.loggers import CSVLogger

        return CSVLogger(exp_name="train", log_dir=out_dir)
    if kind == "tensorboard":
        from torchrl.record.loggers import TensorboardLogger

        return TensorboardLogger(exp_name="train", log_dir=out_dir)
    raise ValueError(f"unknown logger {kind!r}: expected csv, tensorboard or none")


def plot_learning_curve(history: list[dict], path: str, title: str = "") -> None:
    """Episode returns (and Tag's tag rate) against frames, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    extra = [k for k in ("tags_per_env_step",) if history and k in history[0]]
    fig, axes = plt.subplots(1, 1 + len(extra), figsize=(6 * (1 + len(extra)), 4), squeeze=False)
    frames = [row["frames"] for row in history]
    for name in (k for k in (history[0] if history else {}) if k.startswith("return/")):
        axes[0, 0].plot(frames, [row[name] for row in history], label=name.split("/", 1)[1])
    axes[0, 0].set(xlabel="frames", ylabel="mean episode return", title=title)
    axes[0, 0].legend()
    for ax, name in zip(axes[0, 1:], extra):
        ax.plot(frames, [row[name] for row in history])
        ax.set(xlabel="frames", ylabel=name)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
