"""Yardsticks for the MPE recipe: mean episode returns of uniform-random and scripted policies.

``simple_spread``'s scripted policy is :class:`torchrl_warp.envs.simple_spread.GoToLandmark`
(agent ``i`` straight to landmark ``i`` at full force); the recipe's goal for MAPPO
is to close most of the gap between the random and the scripted return, measured on
the same envs (the same seed: the same initial positions) as the trained policy.
Returns are VMAS's: the sum of an agent's rewards over one episode (``max_steps``
steps), averaged over the agents of a group and over the envs.

The CLI prints both returns and the gap, for continuous and discrete actions::

    $ python -m torchrl_warp.recipes.mpe_scripted --num-envs 4096 --device cuda

Examples:
    >>> from torchrl_warp.envs import MPEEnv
    >>> env = MPEEnv("simple_spread", num_envs=8, max_steps=5, seed=0)
    >>> sorted(mean_episode_returns(env, UniformRandom(env)))
    ['agents']
"""
from __future__ import annotations

import argparse

import torch

__all__ = ["UniformRandom", "episode_returns", "mean_episode_returns", "spread_baselines", "gap_closed"]


class UniformRandom:
    """A TorchRL policy drawing the actions of ``groups`` (default: every group) uniformly
    from the env's action spec (continuous: uniform in the bounds; discrete: uniform choices)."""

    def __init__(self, env, groups=None):
        groups = list(env.group_map) if groups is None else list(groups)
        self.specs = {g: env.full_action_spec[g, "action"] for g in groups}

    def __call__(self, tensordict):
        for g, spec in self.specs.items():
            tensordict.set((g, "action"), spec.rand())
        return tensordict


@torch.no_grad()
def episode_returns(env, policy, steps: int | None = None) -> dict[str, torch.Tensor]:
    """Each group's return of the first episode of every env (``[num_envs]``: the sum of an
    agent's rewards up to and including its first done, averaged over the group's agents),
    playing ``policy`` for ``steps`` steps (default: ``env.params.max_steps``, one episode)
    from a reset.

    >>> from torchrl_warp.envs import MPEEnv
    >>> env = MPEEnv("simple_spread", num_envs=8, max_steps=5, seed=0)
    >>> episode_returns(env, UniformRandom(env))["agents"].shape
    torch.Size([8])
    """
    steps = steps or env.params.max_steps
    td = env.rollout(steps, policy, break_when_any_done=False)
    done = td["next", "done"].squeeze(-1)  # [E, T]
    first = (done.cumsum(1) - done.long()) == 0  # steps up to and including the first done
    return {g: (td["next", g, "reward"].squeeze(-1) * first[..., None]).sum(1).mean(-1) for g in env.group_map}


def mean_episode_returns(env, policy, steps: int | None = None) -> dict[str, float]:
    """Each group's mean return of the first episode of every env (:func:`episode_returns`
    averaged over the envs)."""
    return {g: r.mean().item() for g, r in episode_returns(env, policy, steps).items()}


def gap_closed(value: float, random: float, scripted: float) -> float:
    """The fraction of the random -> scripted gap that ``value`` closes (1: as good as scripted).

    >>> gap_closed(-110.0, random=-150.0, scripted=-100.0)
    0.8
    """
    return (value - random) / (scripted - random)


def spread_baselines(num_envs: int = 256, device="cpu", seed: int = 0, continuous_actions: bool = True,
                     max_steps: int = 25, **scenario_kwargs) -> dict[str, float]:
    """``simple_spread``'s mean episode return (group ``agents``) of uniform-random and of
    scripted (:class:`GoToLandmark`) agents, on the same envs (both from ``seed``).

    >>> r = spread_baselines(num_envs=64)
    >>> r["scripted"] > r["random"] + 20
    True
    """
    from torchrl_warp.envs import MPEEnv
    from torchrl_warp.envs.simple_spread import GoToLandmark

    env = MPEEnv("simple_spread", num_envs=num_envs, device=device, seed=seed, continuous_actions=continuous_actions,
                 max_steps=max_steps, **scenario_kwargs)
    out = {}
    for name, policy in (("random", UniformRandom(env)), ("scripted", GoToLandmark(env))):
        torch.manual_seed(seed)  # the random actions
        env.set_seed(seed)  # the same initial positions for both
        returns = mean_episode_returns(env, policy, max_steps)
        out[name] = sum(returns.values()) / len(returns)
    return out


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--n-agents", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=25)
    parser.add_argument("--seed", type=int, default=10_000, help="the recipe evaluates on seed + 10000 (0 + 10000)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    rows = []
    for continuous in (True, False):
        r = spread_baselines(args.num_envs, args.device, args.seed, continuous, args.max_steps, n_agents=args.n_agents)
        rows.append(dict(continuous_actions=continuous, **r))
        print(f"simple_spread n_agents {args.n_agents} max_steps {args.max_steps} "
              f"{'continuous' if continuous else 'discrete  '} actions: random {r['random']:8.2f}  "
              f"scripted {r['scripted']:8.2f}  gap {r['scripted'] - r['random']:7.2f}  "
              f"80% of it: {r['random'] + 0.8 * (r['scripted'] - r['random']):8.2f}", flush=True)
    return rows


if __name__ == "__main__":
    main()
