"""Soak an environment: many steps of hostile random actions, checked as they go.

Actions are drawn outside their specs (``check_actions=False``: the kernels must
clamp them), envs are reset at random on top of the resets of done envs, and every
step is checked on the device without a host sync: every float of the state and
the outputs is finite (kernels' scratch fields aside: ``Field(scratch=True)``), ``done == terminated | truncated``, and every env that was
just reset starts again (step count 0, not done). Host and device memory are
sampled along the way; after a warm-up they must not grow.

Examples:
    >>> from torchrl_warp.envs import CartPoleEnv
    >>> report = soak(CartPoleEnv(num_envs=8, check_actions=False, seed=0), steps=300)
    >>> report.problems()
    []

Command line (on a GPU, the long runs of docs/reliability.md)::

    python -m torchrl_warp.soak tag --num-envs 10000 --agent-steps 1e9 --device cuda
"""
from __future__ import annotations

import argparse
import functools
import json
import os
from dataclasses import asdict, dataclass, field

__all__ = ["soak", "SoakReport"]

#: memory may grow by this much after the warm-up (allocator slack), no more
GROWTH_LIMIT_BYTES = 32 * 2**20


@dataclass
class SoakReport:
    """What a soak saw. ``problems()`` lists what went wrong (empty: nothing)."""

    env: str
    steps: int
    agent_steps: int
    non_finite: int = 0            # floats of the state or outputs that were NaN or infinite
    inconsistent_done: int = 0     # env-steps where done != terminated | truncated
    bad_resets: int = 0            # resets after which an env did not start again
    episodes: int = 0              # resets of done envs, and random ones
    host_bytes: list = field(default_factory=list)    # resident set size, sampled
    device_bytes: list = field(default_factory=list)  # torch's allocated CUDA memory, sampled
    seconds: float = 0.0

    def growth(self, samples: list) -> int:
        """Growth after the warm-up: the least memory of the last quarter of the samples less
        the least of the second quarter. Taking the least of each ignores the one output
        buffer more that some steps hold (a random reset's), which comes and goes; a leak
        raises both."""
        n = len(samples)
        if n < 4:
            return 0
        return min(samples[3 * n // 4:]) - min(samples[n // 4: n // 2])

    def problems(self) -> list[str]:
        out = []
        if self.non_finite:
            out.append(f"{self.non_finite} non-finite floats in the state or outputs")
        if self.inconsistent_done:
            out.append(f"{self.inconsistent_done} env-steps with done != terminated | truncated")
        if self.bad_resets:
            out.append(f"{self.bad_resets} resets after which an env did not start again")
        for what, samples in (("host", self.host_bytes), ("device", self.device_bytes)):
            if self.growth(samples) > GROWTH_LIMIT_BYTES:
                out.append(f"{what} memory grew by {self.growth(samples) / 2**20:.1f} MiB after the warm-up")
        return out


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hostile_actions(env, generator):
    """Random actions, a fraction of them outside the spec (indices out of range, huge floats)."""
    import torch
    from tensordict import TensorDict

    td = TensorDict(batch_size=env.batch_size, device=env.device)
    for key in env.action_keys:
        spec = env.full_action_spec[key]
        value = spec.rand()
        wild = torch.rand(value.shape, device=env.device, generator=generator) < 0.1
        if value.is_floating_point():
            noise = torch.randn(value.shape, device=env.device, generator=generator) * 1e3
        else:
            noise = torch.randint(-50, 50, value.shape, device=env.device, generator=generator).to(value.dtype)
        td.set(key, torch.where(wild, value + noise, value))
    return td


def soak(env, steps: int, reset_every: int = 7, sample_every: int = 50, seed: int = 0) -> SoakReport:
    """Run ``steps`` hostile ``step_and_maybe_reset`` calls on ``env`` and check each (see module doc).

    ``env`` should be built with ``check_actions=False`` (the actions are out of range
    on purpose). Every ``reset_every`` steps a random half of the envs is reset too.
    """
    import time

    import torch

    device = env.device
    generator = torch.Generator(device=device).manual_seed(seed)
    report = SoakReport(type(env).__name__, steps, steps * env.num_envs * env.num_agents)
    counts = torch.zeros(4, dtype=torch.int64, device=device)  # non-finite, done, resets, episodes
    scratch = {f.name for f in env.layout.all_fields() if f.scratch}
    floats = [k for k, v in env.state.items() if v.is_floating_point() and k not in scratch]
    cuda = device.type == "cuda"
    start = time.perf_counter()
    root = env.reset()
    for t in range(steps):
        data, root = env.step_and_maybe_reset(root.update(_hostile_actions(env, generator)))
        was_done = data["next", "done"].reshape(-1)
        if t % reset_every == reset_every - 1:
            mask = torch.rand(env.num_envs, 1, device=device, generator=generator) < 0.5
            root = env.reset(root.exclude("_reset").set("_reset", mask))
            was_done = was_done | mask.reshape(-1)
        state = env.state
        for name in floats:
            counts[0] += (~torch.isfinite(state[name])).sum()
        nxt = data["next"]
        truncated = nxt.get("truncated", state["truncated"].unsqueeze(-1))  # an env without the key: the field
        counts[1] += (nxt["done"] != (nxt["terminated"] | truncated)).sum()
        started = (state["step_count"] == 0) & ~state["done"]
        counts[2] += (was_done & ~started).sum()
        counts[3] += was_done.sum()
        if t % sample_every == 0:
            report.host_bytes.append(_resident_bytes())
            if cuda:
                report.device_bytes.append(torch.cuda.memory_allocated(device))
    report.non_finite, report.inconsistent_done, report.bad_resets, report.episodes = counts.tolist()
    report.seconds = time.perf_counter() - start
    return report


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    from torchrl_warp.envs.mpe import SCENARIO_NAMES

    single = ("cartpole", "acrobot", "mountain_car", "mountain_car_continuous", "pendulum")
    parser.add_argument("env", choices=("tag", "tag_gridworld") + single + SCENARIO_NAMES)
    parser.add_argument("--num-envs", type=int, default=1000)
    parser.add_argument("--agent-steps", type=float, default=1e7, help="stop after this many agent-steps")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="an env parameter (a Python literal), e.g. num_other_agents_observed=2")
    parser.add_argument("--json", help="write the report here")
    args = parser.parse_args(argv)

    import ast

    from torchrl_warp import envs
    from torchrl_warp.envs.mpe import MPEEnv

    classes = {"tag": envs.TagEnv, "tag_gridworld": envs.TagGridWorldEnv, "cartpole": envs.CartPoleEnv,
               "acrobot": envs.AcrobotEnv,
               "mountain_car": envs.MountainCarEnv, "mountain_car_continuous": envs.MountainCarContinuousEnv,
               "pendulum": envs.PendulumEnv}
    cls = classes.get(args.env, functools.partial(MPEEnv, args.env, max_steps=25))
    params = {}
    for item in args.param:
        name, _, value = item.partition("=")
        try:
            params[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            params[name] = value  # a plain string, e.g. neighbor_search=grid
    env = cls(num_envs=args.num_envs, device=args.device, check_actions=False, seed=args.seed, **params)
    steps = max(1, int(args.agent_steps // (args.num_envs * env.num_agents)))
    report = soak(env, steps, seed=args.seed)
    summary = {**asdict(report), "num_envs": args.num_envs, "params": params, "host_growth": report.growth(report.host_bytes),
               "device_growth": report.growth(report.device_bytes), "problems": report.problems()}
    for key in ("host_bytes", "device_bytes"):
        summary[key] = summary[key][:: max(1, len(summary[key]) // 20)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("host_bytes", "device_bytes")}))
    if report.problems():
        raise SystemExit(1)


if __name__ == "__main__":
    main()
