"""Benchmark: environment steps per second through TorchRL's public API.

Steps an environment with random actions (a pool of pre-drawn action TensorDicts
on the env's device, so that the sampler is not what is measured) through
``env.step``, ``env.step_and_maybe_reset`` (the step rollouts and collectors use),
a TorchRL ``Collector`` and our :class:`~torchrl_warp.graphed_collector.GraphedCollector`
(``graphed``: the pool's actions, each batch one CUDA graph replay, the caller's own
(``copy_batches=True``; the bench lets each go, so no copy is made); ``graphed_copied``:
the same while the caller holds a batch of each lane, so that each timed batch is copied
out (three graphs' memory and the copy); ``graphed_in_place``: each
batch a view of the one graph's memory, ``copy_batches=False``, as the training recipe
takes them), for a grid of ``num_envs`` and agent counts. One env-step is every agent of
one env stepped once.

Examples:
    $ python -m torchrl_warp.bench                      # a quick Tag run on the CPU
    $ python -m torchrl_warp.bench --device cuda --env tag --num-envs 1000 10000 \\
          --agents 10+100 --k 2 10 --json bench.json
    $ python -m torchrl_warp.bench --device cuda --env cartpole --num-envs 1000 1000000
    $ python -m torchrl_warp.bench --device cuda --num-envs 2000 --agents 10+990 --k 2 --phases
    $ python -m torchrl_warp.bench --device cuda --num-envs 10000 --k 2 --search grid scan
    $ python -m torchrl_warp.bench --device cuda --env simple_tag --agents 3+1 10+100 --num-envs 1000 --vmas
    $ python -m torchrl_warp.bench --device cuda --env tag_gridworld --agents 999+1 --partial-observation \\
          --num-envs 2000 --phases

MPE scenarios (``--env simple_spread``, ``simple_tag``, ...) run with continuous actions and
``max_steps=25``; ``--agents`` is ``n_agents`` for simple_spread and
``adversaries+good`` for simple_tag. ``--vmas`` also steps VMAS itself (TorchRL's
``VmasEnv``, same scenario, arguments and device) through the same modes in the same run,
and prints our speed-up beside it.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

from typing import TYPE_CHECKING

from torchrl_warp.names import NEIGHBOR_SEARCHES, SCENARIO_NAMES

if TYPE_CHECKING:
    from tensordict import TensorDict
# torch, TorchRL and the envs are imported where they are used: --help answers without them

__all__ = ["make_env", "measure", "main"]

MODES = ("step", "step_and_maybe_reset", "collector", "graphed", "graphed_copied", "graphed_in_place")


#: MPE scenario -> the scenario arguments ``--agents`` sets (``"a+b"``: one number each)
MPE_AGENT_ARGS = {"simple_spread": ("n_agents",), "simple_tag": ("num_adversaries", "num_good_agents")}
MPE_MAX_STEPS = 25


def mpe_arguments(name: str, agents: str | None) -> dict:
    """The scenario arguments of ``--agents`` for MPE scenario ``name`` (none: its defaults)."""
    if agents in (None, "default"):
        return {}
    names = MPE_AGENT_ARGS.get(name)
    counts = [int(x) for x in agents.split("+")]
    if names is None or len(names) != len(counts):
        raise ValueError(f"--agents {agents!r} does not apply to {name} (it takes "
                         f"{'+'.join(names) if names else 'no agent counts: use default'})")
    return dict(zip(names, counts))


def make_env(name: str, num_envs: int, device: str, agents: str | None = None, k: int | None = None, **kw):
    """A benchmark env: ``agents`` is ``"taggers+runners"`` for Tag, see :func:`mpe_arguments` for MPE."""
    from torchrl_warp.envs import CartPoleEnv, MPEEnv, TagEnv, TagGridWorldEnv

    if name == "cartpole":
        return CartPoleEnv(num_envs=num_envs, device=device, check_actions=False, **kw)
    if name in SCENARIO_NAMES:
        return MPEEnv(name, num_envs=num_envs, device=device, max_steps=MPE_MAX_STEPS, check_actions=False,
                      **mpe_arguments(name, agents), **kw)
    if name == "tag_gridworld":
        taggers, runners = (int(x) for x in (agents or "10+1").split("+"))
        if runners != 1:
            raise ValueError(f"tag_gridworld has one runner: --agents {agents!r} asks for {runners}")
        return TagGridWorldEnv(num_envs=num_envs, device=device, check_actions=False, num_taggers=taggers, **kw)
    taggers, runners = (int(x) for x in (agents or "10+100").split("+"))
    return TagEnv(num_envs=num_envs, device=device, check_actions=False, num_taggers=taggers,
                  num_runners=runners, num_other_agents_observed=k or 10, **kw)


def make_vmas_env(name: str, num_envs: int, device: str, agents: str | None = None):
    """VMAS's own scenario through TorchRL's ``VmasEnv``, with the arguments of :func:`make_env`."""
    from torchrl.envs.libs.vmas import VmasEnv

    return VmasEnv(name, num_envs=num_envs, device=device, continuous_actions=True, max_steps=MPE_MAX_STEPS,
                   **mpe_arguments(name, agents))


def _action_pool(env, size: int = 8) -> list[TensorDict]:
    return [env.full_action_spec.rand() for _ in range(size)]


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, steps: int, device, repeats: int) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` runs of ``steps`` calls."""
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        for i in range(steps):
            fn(i)
        _sync(device)
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times)


def measure(env, mode: str, steps: int = 100, repeats: int = 3, warmup: int = 5,
            track_traj_ids: bool = False) -> float:
    """Seconds per step of ``env`` through ``mode`` (one of :data:`MODES`).

    The collector runs with ``track_traj_ids=False`` unless asked: TorchRL's trajectory
    ids ask the host whether any env is done at every step (a device sync). Its batches of
    ``num_envs x steps`` frames are estimated first (:func:`torchrl_warp.memory.collector_bytes`):
    a ``MemoryError`` says so if they will not fit in the device's free memory.
    """
    pool = _action_pool(env)
    td = env.reset()
    if mode == "step":
        def one(i):
            env.step(td.update(pool[i % len(pool)]))
    elif mode == "step_and_maybe_reset":
        state = {"td": td}

        def one(i):
            _, state["td"] = env.step_and_maybe_reset(state["td"].update(pool[i % len(pool)]))
    elif mode == "collector":
        from torchrl.collectors import Collector

        from torchrl_warp.memory import COLLECTOR_BATCHES, check_fits, collector_bytes

        frames = env.batch_size.numel() * steps
        check_fits(f"the collector mode over {type(env).__name__}(num_envs={env.batch_size.numel()}) x {steps} steps",
                   {f"{COLLECTOR_BATCHES:g} batches of {frames} frames": collector_bytes(
                       env, frames, traj_ids=track_traj_ids)},
                   env.device, "lower --num-envs or --steps (a batch is their product)")

        def policy(tensordict):
            return tensordict.update(pool[0])

        collector = Collector(env, policy=policy, frames_per_batch=env.num_envs * steps,
                              total_frames=-1, device=env.device, no_cuda_sync=True,
                              track_traj_ids=track_traj_ids)
        it = iter(collector)
        next(it)  # warm-up batch
        seconds = _time(lambda i: next(it), 1, env.device, repeats) / steps
        collector.shutdown()
        return seconds
    elif mode in ("graphed", "graphed_copied", "graphed_in_place"):  # whole batches as CUDA graphs, pool actions
        from torchrl_warp.graphed_collector import GraphedCollector

        if not hasattr(env, "layout"):
            raise ValueError(f"mode {mode!r} steps torchrl-warp envs only (a GraphedCollector)")
        drawn = {"steps": 0}

        def policy(tensordict):  # the pool's actions in turn, as the other modes step (captured once per graph)
            drawn["steps"] += 1
            return tensordict.update(pool[drawn["steps"] % len(pool)])

        collector = GraphedCollector(env, policy, frames_per_batch=env.num_envs * steps, total_frames=-1,
                                     track_traj_ids=track_traj_ids, copy_batches=mode != "graphed_in_place")
        # warm-up batches: eager, then the graphs captured; graphed_copied holds a batch of each lane
        held = [collector.next() for _ in range(1 + GraphedCollector.LANES)][1:] if mode == "graphed_copied" else []
        collector.next(), collector.next()
        seconds = _time(lambda i: collector.next(), 1, env.device, repeats) / steps
        del held
        collector.shutdown()
        return seconds
    else:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    for i in range(warmup):
        one(i)
    return _time(one, steps, env.device, repeats)


def phase_seconds(env, steps: int = 20, repeats: int = 3) -> list[tuple[str, float]]:
    """Where the step kernel's time goes: seconds per launch of the kernel cut after each phase.

    Compiles one step kernel per prefix of ``env.layout.step`` (phases ``0..i``) and times
    its launches (CUDA-graph replays on the GPU, so Python's launch cost is not counted);
    the difference between consecutive rows is what a phase adds. Every prefix starts
    from the same freshly reset state with random actions; the env's state is put back
    at the end (its actions stay drawn).

    Examples:
        >>> env = make_env("cartpole", 4, "cpu")
        >>> [name for name, _ in phase_seconds(env, steps=2, repeats=1)]
        ['step_cartpole']
    """
    from torchrl_warp.codegen import KernelSpec

    original = env.state.clone()
    env.reset()  # time a state in play: over agents out of the game a kernel does little
    for key, view in env._actions.items():
        view.copy_(env.full_action_spec[key].rand())
    env._own_outputs(copy=True)  # write to a buffer of the env's own, not one handed out
    saved = env.state.clone()
    rows = []
    outputs = env._kernels["step"].outputs
    for i in range(1, len(env.layout.step) + 1):
        spec = KernelSpec("step", tuple(env.layout.step[:i]), outputs, env.layout.max_registers)
        kernel, args = env._backend.compile(spec), env._kernel_args(spec)

        def launch(_):
            env._backend.launch(kernel, env.num_envs, env.num_agents, args, key=f"phases-{i}")

        for w in range(3):  # compile, capture, replay
            launch(w)
        rows.append((phase_name(spec.phases[-1]), _time(launch, steps, env.device, repeats)))
        env.state.update_(saved)
    env.state.update_(original.exclude("action"))
    return rows


def phase_name(phase) -> str:
    """A phase's function name; ``a+b`` for a fused tuple of phases."""
    from torchrl_warp.codegen import phase_functions

    return "+".join(f.__name__ for f in phase_functions((phase,)))


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env", choices=("tag", "tag_gridworld", "cartpole") + SCENARIO_NAMES, default="tag",
                        help="the env to step")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64], help="batch sizes to measure")
    parser.add_argument("--agents", nargs="+", default=None,
                        help="Tag: taggers+runners (default 10+100); simple_spread: n_agents; "
                             "simple_tag: adversaries+good (default: the scenario's)")
    parser.add_argument("--k", type=int, nargs="+", default=[10], help="Tag: agents observed")
    parser.add_argument("--mode", choices=MODES, nargs="+", default=["step", "step_and_maybe_reset"],
                        help="the APIs to step through")
    parser.add_argument("--steps", type=int, default=50, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="repeats (the median is reported)")
    parser.add_argument("--no-cuda-graphs", action="store_true", help="launch kernels from Python every step")
    parser.add_argument("--collector-traj-ids", action="store_true",
                        help="collector mode: let TorchRL track trajectory ids (syncs every step)")
    parser.add_argument("--phases", action="store_true",
                        help="instead of the modes: time the step kernel cut after each of its phases")
    parser.add_argument("--egocentric", action="store_true",
                        help="Tag: egocentric_observation=True (the training recipe's layout)")
    parser.add_argument("--search", choices=NEIGHBOR_SEARCHES, nargs="+", default=["auto"],
                        help="Tag: the k-nearest search(es) (neighbor_search)")
    parser.add_argument("--partial-observation", action="store_true",
                        help="tag_gridworld: use_full_observation=False (own cell and one other's)")
    parser.add_argument("--split-step", type=_split_choice, nargs="+", default=["default"],
                        help="the step as one kernel (fused), one kernel per phase (split), or kernels beginning "
                             "at the given phases (20, or 20,22); default: the env's")
    parser.add_argument("--observation-layout", choices=("rows", "features"), nargs="+", default=["rows"],
                        help="observations stored as each agent's row, or feature by feature "
                             "(feature_major_observations)")
    parser.add_argument("--vmas", action="store_true", help="MPE: also step VMAS itself (TorchRL's VmasEnv)")
    parser.add_argument("--vmas-steps", type=int, default=10, help="steps per repeat for VMAS (it is slow)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.agents is None:
        args.agents = {"tag": ["10+100"], "tag_gridworld": ["10+1"]}.get(args.env, ["default"])
    if args.vmas and args.env not in SCENARIO_NAMES:
        parser.error("--vmas applies to the MPE scenarios")
    if args.env != "tag" and (args.egocentric or args.search != ["auto"]):
        parser.error("--egocentric and --search are Tag options")
    if args.env != "tag_gridworld" and args.partial_observation:
        parser.error("--partial-observation is a tag_gridworld option")
    if args.phases:
        return _print_phases(args)

    results = []
    print(f"{'env':26} {'device':7} {'agents':>9} {'k':>3} {'search':>6} {'num_envs':>9} {'mode':22} "
          f"{'env-steps/s':>13} {'agent-steps/s':>14} {'ms/step':>9}{'  vs VMAS' if args.vmas else ''}")
    for env, agents, k, search, n in _configurations(args):
        num_agents = env.num_agents
        for mode in args.mode:
            sec = measure(env, mode, steps=args.steps, repeats=args.repeats, track_traj_ids=args.collector_traj_ids)
            results.append(_row(args, "ours", env, agents, k, search, n, mode, sec, num_agents))
        if args.vmas:
            del env
            vmas = make_vmas_env(args.env, n, args.device, agents)
            for mode in args.mode:
                sec = measure(vmas, mode, steps=args.vmas_steps, repeats=args.repeats, warmup=2)
                ours = next(r for r in results if r["impl"] == "ours" and r["num_envs"] == n
                            and r["agents_arg"] == agents and r["mode"] == mode)
                results.append(_row(args, "vmas", vmas, agents, k, search, n, mode, sec, num_agents,
                                    speedup=sec / ours["seconds_per_step"]))
            del vmas
        else:
            del env
    if args.json:
        import torch

        meta = dict(torch=torch.__version__, date=time.strftime("%Y-%m-%d"),
                    gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, results=results), f, indent=1)
    return results


def _row(args, impl, env, agents, k, search, n, mode, sec, num_agents, speedup=None) -> dict:
    """One result, printed as it comes."""
    row = dict(env=args.env, impl=impl, device=str(env.device), backend=getattr(env, "backend", "vmas"),
               split_step=getattr(env, "split_step", None),
               feature_major=getattr(env, "feature_major_observations", None),
               agents=num_agents, agents_arg=agents, cuda_graphs=not args.no_cuda_graphs, egocentric=args.egocentric,
               search=search, k=k, num_envs=n, mode=mode, seconds_per_step=sec,
               env_steps_per_s=n / sec, agent_steps_per_s=n * num_agents / sec)
    split = row["split_step"]
    name = (args.env + (f"/split@{','.join(map(str, split))}" if isinstance(split, tuple) else "/split" if split else "")
            + ("/features" if row["feature_major"] else "")
            if impl == "ours" else f"vmas:{args.env}")
    extra = ""
    if speedup is not None:
        row["ours_vs_vmas"] = speedup
        extra = f"  x{speedup:,.1f}"
    print(f"{name[:26]:26} {row['device']:7} {agents:>9} {str(k or '-'):>3} {search:>6} {n:>9} {mode:22} "
          f"{row['env_steps_per_s']:>13,.0f} {row['agent_steps_per_s']:>14,.0f} {1e3 * sec:>9.3f}{extra}", flush=True)
    return row


def _split_choice(value: str):
    """``--split-step``: ``default``, ``fused``, ``split``, or phase indices (``"20,22"`` -> ``(20, 22)``)."""
    if value in ("default", "fused", "split"):
        return value
    try:
        return tuple(int(x) for x in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected default, fused, split or phase indices such as 20,22; "
                                         f"got {value!r}") from None


def _configurations(args):
    """``(env, agents, k, search, num_envs)`` for each point of the grid the arguments ask
    for (``search``: the one the env runs, ``"-"`` for CartPole), one env alive at a time."""
    tag = args.env == "tag"
    mpe = args.env in SCENARIO_NAMES or args.env == "tag_gridworld"  # agent counts, no k
    for agents, k, search, split, obs, n in itertools.product(
            args.agents if tag or mpe else ["1"], args.k if tag else [None], args.search if tag else [None],
            args.split_step, args.observation_layout, args.num_envs):
        options = dict(cuda_graphs=not args.no_cuda_graphs, feature_major_observations=obs == "features")
        if split != "default":
            options["split_step"] = split if isinstance(split, tuple) else split == "split"
        if args.egocentric:
            options["egocentric_observation"] = True
        if search:
            options["neighbor_search"] = search
        if args.partial_observation:
            options["use_full_observation"] = False
        env = make_env(args.env, n, args.device, agents, k, **options)
        yield env, agents, k, (env.search if tag else "-"), n
        del env


def _print_phases(args) -> list[dict]:
    results = []
    for env, agents, k, search, n in _configurations(args):
        print(f"{args.env} {agents} k={k or '-'} search={search} num_envs={n} on {env.device}: "
              f"step kernel up to each phase")
        previous = 0.0
        for name, sec in phase_seconds(env, steps=args.steps, repeats=args.repeats):
            print(f"  {name:>48} {1e3 * sec:9.3f} ms   (+{1e3 * (sec - previous):.3f})", flush=True)
            results.append(dict(env=args.env, agents=agents, k=k, search=search, num_envs=n, phase=name,
                                seconds=sec))
            previous = sec
        del env
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(results=results), f, indent=1)
    return results


if __name__ == "__main__":
    main()
