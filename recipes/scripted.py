"""Scripted Tag policies, to put the trained ones in scale.

``Steer(env, group, other, away)`` is a TorchRL policy (a callable on TensorDicts)
that turns each agent of ``group`` towards (or away from) the nearest agent of
``other`` still in the game, at full acceleration. It reads the positions from the
env's state, so it is a yardstick, not a learner: ``Steer(env, "taggers", "runners")``
is a chaser, ``Steer(env, "runners", "taggers", away=True)`` a runner that flees.

The CLI measures tags per episode (over one episode length of steps, as the
recipe's evaluation counts them: an env whose runners are all tagged starts over) for
random or scripted taggers against random or scripted runners::

    $ python -m torchrl_warp.recipes.scripted --grid-length 20 40 --num-envs 64

Examples:
    >>> from torchrl_warp.envs import TagEnv
    >>> env = TagEnv(num_envs=2, num_taggers=1, num_runners=3, num_other_agents_observed=2)
    >>> chase = Steer(env, "taggers", "runners")
    >>> td = env.rollout(3, lambda td: chase(td.update(env.full_action_spec.rand())))  # runners: random
    >>> td["taggers", "action"].shape
    torch.Size([2, 3, 1, 2])
"""
from __future__ import annotations

import argparse
import math

import torch

from torchrl_warp.envs import TagEnv
from torchrl_warp.envs.tag import action_table
from torchrl_warp.recipes.metrics import tags_per_episode

__all__ = ["Steer", "scripted_tags_per_episode"]


class Steer:
    """Turn each agent of ``group`` towards (``away``: away from) its nearest ``other``."""

    def __init__(self, env: TagEnv, group: str, other: str, away: bool = False):
        slices = env.layout.group_slices()
        self.env, self.group, self.away = env, group, away
        self.me, self.others = slices[group], slices[other]
        p = env.params
        self.turns = action_table(p.max_turn, p.num_turn_levels).to(env.device)
        self.full_speed = p.num_acceleration_levels  # the last index: the largest acceleration

    def __call__(self, tensordict):
        state = self.env.state
        pos, direction, in_game = state["pos"], state["direction"], state["in_game"]
        me, others = pos[:, self.me], pos[:, self.others]
        distance = (me[:, :, None] - others[:, None]).norm(dim=-1)  # [E, mine, others]
        distance = distance.masked_fill(~in_game[:, None, self.others], float("inf"))
        target = others.gather(1, distance.argmin(-1)[..., None].expand(-1, -1, 2))
        delta = target - me
        heading = torch.atan2(delta[..., 1], delta[..., 0]) + (math.pi if self.away else 0.0)
        turn = torch.remainder(heading - direction[:, self.me] + math.pi, 2 * math.pi) - math.pi
        turn_index = (turn[..., None] - self.turns).abs().argmin(-1)
        action = torch.stack([torch.full_like(turn_index, self.full_speed), turn_index], -1)
        return tensordict.set((self.group, "action"), action)


def scripted_tags_per_episode(env: TagEnv, taggers: str, runners: str) -> float:
    """Runners tagged per env in one episode length of steps; each side ``"random"`` or
    scripted (``"chase"`` taggers, ``"flee"`` runners)."""
    policies = []
    if taggers == "chase":
        policies.append(Steer(env, "taggers", "runners"))
    if runners == "flee":
        policies.append(Steer(env, "runners", "taggers", away=True))

    def policy(td):
        td.update(env.full_action_spec.rand())
        for p in policies:
            p(td)
        return td

    return tags_per_episode(env, env.rollout(env.params.episode_length, policy, break_when_any_done=False))


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid-length", type=float, nargs="+", default=[20.0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--agents", default="10+100", help="taggers+runners")
    parser.add_argument("--episode-length", type=int, default=100)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    taggers, runners = (int(x) for x in args.agents.split("+"))
    rows = []
    for length in args.grid_length:
        for tagger_policy, runner_policy in (("random", "random"), ("chase", "random"),
                                             ("random", "flee"), ("chase", "flee")):
            torch.manual_seed(0)  # the random actions
            env = TagEnv(num_envs=args.num_envs, num_taggers=taggers, num_runners=runners, grid_length=length,
                         episode_length=args.episode_length, device=args.device, seed=0)
            tags = scripted_tags_per_episode(env, tagger_policy, runner_policy)
            rows.append(dict(grid_length=length, taggers=tagger_policy, runners=runner_policy, tags=tags))
            print(f"grid_length {length:6.1f}  taggers {tagger_policy:6}  runners {runner_policy:6}  "
                  f"{tags:6.1f} tags per episode", flush=True)
    return rows


if __name__ == "__main__":
    main()
