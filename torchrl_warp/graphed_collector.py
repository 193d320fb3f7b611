"""GraphedCollector: TorchRL's ``Collector`` loop, replayed as one CUDA graph per batch.

A batch of ``T = frames_per_batch / num_envs`` steps (the policy, the env's step, its
masked reset, the trajectory ids) is captured once as a ``torch.cuda.CUDAGraph`` and
replayed: one launch from the host per batch instead of dozens per step, which is
what small and medium batches are made of. Each batch is the same TensorDict, key
for key and value for value, that ``torchrl.collectors.Collector`` returns for the
same env, policy and seeds, and it is the caller's own: two graphs ("lanes") are replayed
in turn, and a batch is handed out in its lane's memory, which is written again only once
the caller holds no tensor of it (the usual loop, done with one batch when it asks for the
one after the next); a caller that keeps more gets copies. On the CPU and in the CUDA
simulator the same loop runs eagerly.

What it takes (checked, with an error naming what is wrong):

* ``env``: a :class:`~torchrl_warp.WarpEnv`, or a ``TransformedEnv`` over one whose
  transforms can run inside the graph (:data:`~torchrl_warp.transformed_step.CAPTURABLE`:
  ``RewardSum``, ``StepCounter``, ``ObservationNorm``...; the others are refused, by name).
  Its step is TorchRL's with the reset masked instead of asked for
  (:func:`~torchrl_warp.transformed_step.step_and_maybe_reset`).
* ``policy``: a TensorDict module (or ``None``: random actions, the same draws as
  TorchRL's ``RandomPolicy`` over the env's action spec, which ``Collector`` uses) whose
  forward does not wait for the host (no ``.item()``, no data-dependent Python branch);
  sampling from torch's generator is fine (the graph draws it on the device). A policy
  that waits for the host is refused when the first graph is built, with the capture's
  error (a policy cannot be screened beforehand: libraries such as TorchRL's
  ``TanhNormal`` check their arguments on the host eagerly and skip that under capture).
  The env has not stepped, and the process goes on as before the capture (torch's CUDA
  generator is taken out of capture mode): collect with ``graphs=False`` or with another
  policy.

The graph reads the policy's parameters where they are: an optimizer that updates them
in place (every torch optimizer) needs nothing; :meth:`update_policy_weights_` copies
new weights into them. Anything that changes what the graph captured (new parameter
tensors, ``env.set_seed``, ``env.set_reset_pool``, stepping or resetting the env
outside the collector) is noticed before the next batch, which then builds a new graph.

With ``env.check_actions`` on, action values are checked on the device and the batch
that held an invalid one raises after it ran (a graph cannot stop half-way): the env
then has taken that step, so reset it before going on. With it off (the recipe's
setting) a batch costs no host sync at all.

Examples:
    >>> from torchrl_warp.envs import CartPoleEnv
    >>> collector = GraphedCollector(CartPoleEnv(num_envs=4, seed=0), None, frames_per_batch=40, total_frames=80)
    >>> batches = list(collector)
    >>> [batch.batch_size for batch in batches]
    [torch.Size([4, 10]), torch.Size([4, 10])]
    >>> sorted(batches[0]["collector"].keys())
    ['traj_ids']
"""
from __future__ import annotations

import functools
import gc
import numbers
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import TransformedEnv
from torchrl.data import Bounded
from torchrl.collectors.utils import split_trajectories
from torchrl.envs.utils import ExplorationType, set_exploration_type

from torchrl_warp.capture import cuda_graph, no_cyclic_collection
from torchrl_warp.checks import action_violation, check_flag
from torchrl_warp.env import WarpEnv
from torchrl_warp.transformed_step import step_and_maybe_reset as transformed_step_and_maybe_reset
from torchrl_warp.transformed_step import keep_flags_on_host, transforms_of, warp_base

__all__ = ["GraphedCollector"]


class GraphedCollector:
    """Batches of ``[num_envs, frames_per_batch / num_envs]`` steps, each replayed from a CUDA graph.

    Args:
        env: the :class:`~torchrl_warp.WarpEnv` to step, or a ``TransformedEnv`` over one.
        policy: a TensorDict module writing the env's action keys, or ``None`` for
            random actions (TorchRL's ``RandomPolicy``).
        frames_per_batch: env steps per batch, a multiple of ``env.num_envs``.
        total_frames: stop after this many frames (the last batch is whole, as
            ``Collector``'s); ``-1`` never stops.
        track_traj_ids: write ``("collector", "traj_ids")`` as ``Collector`` does
            (on the device: no host sync either way).
        exploration_type: the exploration type the policy runs under (TorchRL's
            ``Collector`` default: ``RANDOM``, sampling).
        graphs: capture and replay batches as CUDA graphs; ``None``: on a CUDA env.
            ``False`` runs the same loop eagerly (the CPU and the simulator always do).
        copy_batches: each batch is the caller's own (``Collector``'s contract): the memory
            of a lane whose last batch the caller let go, handed out without a copy, or, while
            the caller holds a batch of every lane, a copy. ``False``: each batch views the
            one graph's memory and is overwritten by the next batch (no copy: a batch less of
            memory and of traffic), for a loop that is done with a batch before it asks for
            the next, as a PPO update is. New entries set on a batch stay the caller's.
        **collector_kwargs: ``Collector``'s other arguments, so that a ``Collector(...)``
            call takes this class by its name alone. ``postproc`` and ``split_trajs`` apply
            to each batch as ``Collector`` applies them; the devices may be ``None`` or the
            env's (everything stays there); ``no_cuda_sync``, ``trust_policy`` and
            ``cudagraph_policy`` change nothing (no sync, and the policy is in the graph).
            Any other at a value other than ``Collector``'s default is a ``ValueError``
            saying why it does not apply, and a name ``Collector`` does not take is a
            ``TypeError``.
    """

    def __init__(self, env, policy=None, *, frames_per_batch: int, total_frames: int = -1,
                 track_traj_ids: bool = True, exploration_type: ExplorationType = ExplorationType.RANDOM,
                 graphs: bool | None = None, copy_batches: bool = True, **collector_kwargs):
        if isinstance(env, TransformedEnv):  # its transforms run inside the graph (or are refused, named)
            warp = warp_base(env)
            self._step_and_maybe_reset = functools.partial(transformed_step_and_maybe_reset, env)
        elif isinstance(env, WarpEnv):
            warp = env
            self._step_and_maybe_reset = env.step_and_maybe_reset
        else:
            raise TypeError(f"GraphedCollector steps a torchrl_warp WarpEnv (or a TransformedEnv over one), got "
                            f"{type(env).__name__}")
        steps = _positive_int("frames_per_batch", frames_per_batch)
        if steps % warp.num_envs:
            raise ValueError(f"frames_per_batch={frames_per_batch} is no multiple of the env's num_envs="
                             f"{warp.num_envs}: every batch is [num_envs, steps]; use "
                             f"{-(-steps // warp.num_envs) * warp.num_envs}")
        if total_frames != -1:
            _positive_int("total_frames", total_frames)
        check_flag("GraphedCollector", "track_traj_ids", track_traj_ids)
        if graphs is None:
            graphs = warp.device.type == "cuda"
        check_flag("GraphedCollector", "graphs", graphs)
        check_flag("GraphedCollector", "copy_batches", copy_batches)
        if graphs and warp.device.type != "cuda":
            raise ValueError(f"graphs=True needs an env on a CUDA device; this one is on {warp.device}")
        self.postproc, self.split_trajs = _collector_options(warp, collector_kwargs)
        if self.split_trajs and not track_traj_ids:
            raise ValueError("split_trajs=True splits batches by ('collector', 'traj_ids'): it needs "
                             "track_traj_ids=True")
        self.env = env
        self._warp = warp
        self.policy = _RandomActions(env.full_action_spec) if policy is None else policy
        self.frames_per_batch = steps
        self.total_frames = total_frames
        self.track_traj_ids = track_traj_ids
        self.exploration_type = exploration_type
        self.graphs = graphs
        self.copy_batches = copy_batches
        self._steps = steps // warp.num_envs
        self._frames = 0
        self._warm = False
        self._drop_graphs()
        with torch.no_grad():
            self._carrier = env.reset()
        if track_traj_ids:  # as Collector: env i starts trajectory i, the next new one is num_envs
            self._carrier.set(("collector", "traj_ids"), torch.arange(warp.num_envs, device=warp.device))
            self._next_traj_id = torch.full((), warp.num_envs, dtype=torch.int64, device=warp.device)
        self._checks = _ActionChecks(env, warp) if graphs and warp.check_actions else None

    # ----- TorchRL's collector interface ---------------------------------------------------
    def __iter__(self) -> Iterator[TensorDictBase]:
        return self.iterator()

    def iterator(self) -> Iterator[TensorDictBase]:
        """The batches, until ``total_frames`` (each one the caller's own, unless ``copy_batches=False``)."""
        while self.total_frames == -1 or self._frames < self.total_frames:
            yield self.next()

    def next(self) -> TensorDictBase:
        """One batch: replayed from a graph (built on first use, rebuilt when stale) or eager."""
        with torch.no_grad():
            if self._warm and (not self._lanes or self._current_stamp() == self._stamp):
                batch = self._replay()
            else:
                # eager: the first batch (it compiles the kernels and warms the policy up) and the one
                # after a change the graphs did not capture; the next batch is then captured
                self._drop_graphs()
                batch, self._carrier = self._rollout(self._carrier)
                self._warm = True
        self._frames += self.frames_per_batch
        if self._checks is not None:
            self._checks.raise_if_any()
        if self.split_trajs:
            batch = split_trajectories(batch, prefix="collector")
        if self.postproc is not None:
            batch = self.postproc(batch)
        return batch

    def update_policy_weights_(self, weights=None) -> None:
        """Copy ``weights`` (a TensorDict of the policy's parameters, or a module with the same
        parameters) into the policy, in place; ``None``: nothing to do (the graph reads the
        policy's parameters where they are, so in-place optimizer steps are seen)."""
        if weights is None:
            return
        if isinstance(weights, torch.nn.Module):
            weights = TensorDict.from_module(weights)
        with torch.no_grad():
            TensorDict.from_module(self.policy).update_(weights)

    def shutdown(self) -> None:
        """Drop the graphs and their memory (the env stays as it is)."""
        self._drop_graphs()
        self._warm = False

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed the env (as ``Collector.set_seed``); the next batch builds a new graph."""
        return self.env.set_seed(seed, static_seed=static_seed)

    def state_dict(self) -> dict:
        return {"frames": self._frames}

    def load_state_dict(self, state: dict) -> None:
        self._frames = int(state["frames"])

    def __len__(self) -> int:
        if self.total_frames == -1:
            raise TypeError("a GraphedCollector with total_frames=-1 has no length")
        return -(-self.total_frames // self.frames_per_batch)

    # ----- the graphs ----------------------------------------------------------------------
    #: graphs whose batches are handed out as they are (no copy), taken in turn: a loop holds one
    #: batch while it asks for the next, so the other graph's memory is free again by then
    LANES = 2

    def _replay(self) -> TensorDictBase:
        """The next batch from a graph: ``copy_batches=False``, the one graph's memory (a view);
        else, from the first of :attr:`LANES` graphs whose last batch the caller has let go (built
        when none is free), its memory handed out as it is; when the caller still holds a batch of
        each, from a graph of the collector's own, copied out."""
        if not self.copy_batches:
            lane = self._lanes[0] if self._lanes else self._new_lane(self._lanes)
            return self._replayed(lane).copy()
        lane = next((lane for lane in self._lanes if not lane.held()), None)
        if lane is None and len(self._lanes) < self.LANES:
            lane = self._new_lane(self._lanes)
        if lane is None:  # the caller keeps more batches than there are lanes
            own = self._own[0] if self._own else self._new_lane(self._own)
            return self._replayed(own).clone()
        self._replayed(lane)
        return lane.hand_out()

    def _new_lane(self, lanes: list) -> "_RolloutGraph":
        """A new graph (captured, or eager under ``graphs=False``) appended to ``lanes``; it starts
        where every graph of this collector starts: where the last batch, of any of them, ended."""
        first = next(iter(self._lanes + self._own), None)
        with no_cyclic_collection():
            lane = _RolloutGraph(self, capture=self.graphs, sibling=first)
        lanes.append(lane)
        self._stamp = self._current_stamp()
        if lane._graph is not None:  # uncaptured, it counts them after each batch
            gc.collect(0)
            lane.note_own_references()
        return lane

    def _replayed(self, lane: "_RolloutGraph") -> TensorDictBase:
        self._graph = lane
        batch = lane.replay()
        if lane._graph is None:  # run from Python: nothing captured to go stale
            self._stamp = self._current_stamp()
        return batch

    def _drop_graphs(self) -> None:
        #: the graphs whose batches are handed out, and the one whose batches are copied out
        self._lanes, self._own = [], []
        self._graph, self._stamp = None, None  # the graph of the last batch; what they captured

    def _current_stamp(self) -> tuple:
        """What the graphs captured that could change under them: the env's launch arguments and
        output generation, the addresses of the policy's and the transforms' parameters and buffers."""
        env = self._warp
        modules = [self.policy] if isinstance(self.policy, torch.nn.Module) else []
        if self.env is not env:
            modules += transforms_of(self.env)
        tensors = [t.data_ptr() for m in modules for t in (*m.parameters(), *m.buffers())]
        return (tuple(id(a) for a in env._args.values()), env._outputs.generation, tuple(tensors),
                tuple(id(m) for m in modules))

    # ----- the loop ------------------------------------------------------------------------
    def _rollout(self, carrier: TensorDictBase, keep: list | None = None,
                 slabs: "_Slabs | None" = None) -> tuple[TensorDictBase, TensorDictBase]:
        """``Collector.rollout`` on one env: ``T`` steps from ``carrier`` -> (the batch, the next carrier).
        ``keep``: a list that is given every step's TensorDicts (a graph keeps its buffers).
        ``slabs``: the env writes its outputs there, and the batch's env outputs are views of
        them (no stacking copy); else the batch is the steps stacked (and ``keep`` is also given
        the env's output buffers: transforms may drop every view of one)."""
        steps = []
        allocating = slabs.allocating() if slabs else self._kept_buffers(keep) if keep is not None else nullcontext()
        with set_exploration_type(self.exploration_type), allocating:
            for _ in range(self._steps):
                out = self.policy(carrier)
                if out is not carrier:
                    carrier.update(out)
                data, following = self._step_and_maybe_reset(carrier)
                if self._checks is not None:
                    self._checks.note(data)
                steps.append(data)
                if keep is not None:
                    keep.append((data, following))
                if self.track_traj_ids:
                    following.set("collector", data.get("collector").copy())
                    following.set(("collector", "traj_ids"), self._new_traj_ids(data))
                carrier = following
        batch = slabs.stack(steps) if slabs else TensorDict.maybe_dense_stack(steps, dim=1)
        return batch.exclude(*[k for k in batch.keys(True) if _private(k)]), carrier

    @contextmanager
    def _kept_buffers(self, keep: list):
        """The env's new output buffers are also appended to ``keep`` while in this block."""
        outputs = self._warp._outputs
        allocate = outputs.fresh

        def fresh(buffer):
            keep.append(allocate(buffer))
            return keep[-1]

        with outputs.buffers_from(fresh):
            yield

    def _new_traj_ids(self, data: TensorDictBase) -> torch.Tensor:
        """The trajectory ids after ``data``'s step: each env that ended one takes the next free
        id, in env order (``Collector``'s ``masked_scatter`` of an ``arange``), on the device."""
        ended = self._ended(data)
        order = ended.cumsum(0)
        ids = torch.where(ended, self._next_traj_id + order - 1, data.get(("collector", "traj_ids")))
        self._next_traj_id.add_(order[-1])
        return ids

    def _ended(self, data: TensorDictBase) -> torch.Tensor:
        """Per env, whether any of the env's done flags is set after ``data``'s step (what
        ``Collector`` reads to end a trajectory): one reduction over the output buffer's flags
        when the done keys are exactly its contiguous run of flags, else one per key."""
        flags = [data.get(("next", *((k,) if isinstance(k, str) else k))) for k in self.env.done_keys]
        run = _one_run(flags)
        if run is not None:
            return run.any(-1)
        ended = None
        for flag in flags:
            flag = flag.reshape(self._warp.num_envs, -1).any(-1)
            ended = flag if ended is None else ended | flag
        return ended


def _one_run(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """``[num_envs, n]``: the ``n`` elements of ``tensors`` in each env, if together they are one
    contiguous run of the same storage per env (the env's flags in its output buffer); else None."""
    first = tensors[0]
    storage = first.untyped_storage().data_ptr()
    if any(t.dtype != first.dtype or t.dim() == 0 or t.shape[0] != first.shape[0] or t.stride(0) != first.stride(0)
           or t.untyped_storage().data_ptr() != storage for t in tensors):
        return None
    low = min(t.storage_offset() for t in tensors)
    geometry = tuple((t.shape, t.stride(), t.storage_offset() - low) for t in tensors)
    width = _RUNS.get(geometry)
    if width is None:
        offsets = sorted(o for shape, stride, start in geometry for o in _offsets(shape[1:], stride[1:], start))
        width = len(offsets) if offsets == list(range(len(offsets))) and first.stride(0) >= len(offsets) else 0
        _RUNS[geometry] = width
    return first.as_strided((first.shape[0], width), (first.stride(0), 1), low) if width else None


#: the run width found for a done flags geometry (0: not one run)
_RUNS: dict = {}


def _offsets(shape, stride, start: int) -> list[int]:
    """The storage offsets of one env's elements of a tensor of per-env ``shape`` and ``stride``."""
    offsets = [start]
    for size, step in zip(shape, stride):
        offsets = [o + i * step for o in offsets for i in range(size)]
    return offsets


class _RolloutGraph:
    """One batch of the collector's loop captured as a CUDA graph, from its current carrier.

    The env writes the batch's outputs straight into time-major slabs (:class:`_Slabs`), and
    the batch's env outputs are views of them: no stacking copy. The graph is a cycle from a
    carrier whose env outputs are the slabs' first root slot: it begins by copying the env's
    outputs where the last batch ended (the slabs' ``last`` slot) into it, and ends by
    copying its last carrier's other entries (trajectory ids...) into the carrier's. Over a
    ``TransformedEnv`` (whose transforms rewrite the env's outputs) there are no slabs: the
    start carrier is the graph's own copy, the steps are stacked, and the cycle ends by
    copying the last carrier into it whole. Uncaptured (``capture=False``, on the CPU and the
    simulator) the same cycle runs eagerly.

    A ``sibling`` (another graph of the same collector) shares where a batch ends (its ``last``
    slot and its carrier's other entries, or its whole start carrier), so that graphs replayed
    in any order go on from each other's batches.

    It holds every step's TensorDicts (what the policy and the trajectory ids wrote) for as
    long as it lives: each replay writes them, and memory that a capture allocated and then
    freed is not safe from the tensors allocated after it (a batch handed out earlier was
    overwritten by the next replay on an H200 when it did not).
    """

    def __init__(self, collector: GraphedCollector, capture: bool = True, sibling: "_RolloutGraph | None" = None):
        env = collector._warp
        self._collector = collector
        outputs = env._outputs
        before = (outputs.buffer, outputs.generation, outputs._handed_out, collector._carrier)
        if collector.env is env:
            self._slabs = _Slabs(outputs, collector._steps, last=sibling._slabs.last if sibling else None)
            self._start = self._slabs.start(env, collector._carrier)
            self._carried = self._slabs.carried
            if sibling is not None:  # one set of carried entries (trajectory ids...) for every lane
                self._start.update(sibling._start.select(*self._carried))
        else:  # transforms rewrite the env's outputs: the carrier is the graphs' own copy, stacked steps
            keep_flags_on_host(collector.env)
            self._slabs = None
            self._start = sibling._start if sibling else collector._carrier.clone()
            self._carried = list(self._start.keys(True, True))
        self._graph, self._steps = None, []
        self._references: list[tuple[torch.Tensor, int]] = []  # see note_own_references
        if capture:
            self._graph = torch.cuda.CUDAGraph()
            checks_flag, env.check_actions = env.check_actions, False  # checked on the device (_ActionChecks)
            try:
                with cuda_graph(self._graph, env.device):
                    self._cycle(keep=self._steps)
            except Exception as error:
                _release_failed_capture(self._graph, env.device)
                self._graph = None
                outputs.buffer, outputs.generation, outputs._handed_out, collector._carrier = before
                env._output_shift.fill_(outputs.shift)
                first = _first_error(error)  # the capture's end reports "invalidated"; the cause came first
                what = "policy" if collector.env is env else "policy or a transform"
                raise RuntimeError(
                    f"GraphedCollector could not capture a batch of {type(collector.env).__name__} with policy "
                    f"{type(collector.policy).__name__} as a CUDA graph ({type(first).__name__}: "
                    f"{str(first).strip().splitlines()[0] if str(first).strip() else ''}). A {what} in a graph "
                    f"must not wait for the host (.item(), a Python branch on a tensor; "
                    f"torchrl_warp.host_syncs.forbid_host_syncs finds it on any device); pass graphs=False to "
                    f"collect eagerly. The env has not stepped, and it and this collector can go on") from error
            finally:
                env.check_actions = checks_flag

    def _cycle(self, keep: list | None = None) -> TensorDictBase:
        """One batch from the start carrier, which then holds the last carrier's entries."""
        if self._slabs is not None:
            self._slabs.rewind()
        batch, following = self._collector._rollout(self._start.copy(), keep=keep, slabs=self._slabs)
        self._start.update_(following.select(*self._carried))
        # where the next batch, eager or of any graph, goes on from: the env's outputs in the last
        # slot and the other entries where every graph of the collector writes them
        self._collector._carrier = following.copy().update(self._start.select(*self._carried)) \
            if self._slabs is not None else self._start.copy()
        self._batch = batch
        return batch

    def replay(self) -> TensorDictBase:
        """The next batch, in the graph's memory: the graph replayed (or, uncaptured, the cycle run)."""
        if self._graph is None:
            with no_cyclic_collection():
                self._cycle()
            gc.collect(0)  # all that the batch made is young: its garbage goes
            self.note_own_references()
        else:
            self._graph.replay()
        return self._batch

    def note_own_references(self) -> None:
        """Count the references this graph itself holds to the memory its batch lives in (the
        batch, the steps a capture keeps, the start carrier...): more, later, are the caller's.
        Called after the graph was built or run with the cyclic collector held off, and a
        collection of the youngest generation: what that left in reference cycles is then gone,
        not counted as the graph's (and, freed later, taken for the caller's going)."""
        tensors = {_storage(t): t for t in self._batch.values(True, True)}
        self._references = [(t, _references(t)) for t in tensors.values()]

    def held(self) -> bool:
        """Whether the caller still holds a tensor (a batch handed out, or a view of one) that lives
        in this graph's memory: the next replay would overwrite it."""
        return any(_references(t) > n for t, n in self._references)

    def hand_out(self) -> TensorDictBase:
        """The batch as new views of the graph's memory: the caller's until it lets them go."""
        return self._batch.apply(lambda t: t.view(t.shape))


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


def _references(tensor: torch.Tensor) -> int:
    """The references to ``tensor``'s memory (its storage): one per tensor viewing it, and one
    for the storage object this call looks at."""
    return torch._C._storage_Use_Count(tensor.untyped_storage()._cdata)


class _Slabs:
    """Time-major homes for a batch's env outputs: ``next[t]`` for step ``t``'s outputs and
    ``root[t]`` for the outputs it starts from, and ``last`` for those after the last step (reset
    where done; shared by the graphs of a collector: where the next batch starts), each slot one
    output buffer (:class:`~torchrl_warp.outputs.Outputs`).

    While :meth:`allocating`, the env's new output buffers are these slots, in the order a
    ``step_and_maybe_reset`` takes them (the step's, then the masked reset's); :meth:`stack`
    then finds a batch entry's steps one slot apart and views them as ``[num_envs, T, ...]``.

    Examples:
        >>> from torchrl_warp.envs import CartPoleEnv
        >>> env = CartPoleEnv(num_envs=3)
        >>> slabs = _Slabs(env._outputs, steps=4)
        >>> slabs.next.shape, slabs.root.shape, slabs.last.shape  # bytes per slot: 3 x (4 + 1) floats, 3 x 3 flags
        (torch.Size([4, 80]), torch.Size([4, 80]), torch.Size([80]))
    """

    def __init__(self, outputs, steps: int, last: torch.Tensor | None = None):
        nbytes = outputs.base.numel()
        self._outputs, self._steps = outputs, steps
        self.next = torch.empty((steps, nbytes), dtype=torch.uint8, device=outputs.device)
        self.root = torch.empty((steps, nbytes), dtype=torch.uint8, device=outputs.device)
        self.last = torch.empty(nbytes, dtype=torch.uint8, device=outputs.device) if last is None else last
        self._taken = 0

    def start(self, env: WarpEnv, carrier: TensorDictBase) -> TensorDictBase:
        """The carrier a batch starts from: a shallow copy of ``carrier`` whose env outputs are
        ``root[0]``. The env's current outputs go to ``last``, where a batch ends (already there
        when a sibling's batch ended), and each batch begins with :meth:`rewind` (``last`` into
        ``root[0]``)."""
        outputs = self._outputs
        outputs._handed_out = True  # the env's current buffer is the carrier's: copy it
        with outputs.buffers_from(lambda buffer: self.last):
            env._own_outputs(copy=True)
        last, outputs.buffer = outputs.buffer, self.root[0]
        env_outputs = outputs.hand_out(with_reward=False)  # views of root[0]
        outputs.buffer = last  # handed out too: the next step takes a new buffer
        start = carrier.copy()
        start.update(env_outputs)
        #: the carrier's entries that are not env outputs (trajectory ids, what the policy carries)
        self.carried = [k for k in start.keys(True, True) if k not in set(env_outputs.keys(True, True))]
        # the graph's own: each batch ends by writing its last carrier's entries into these, and the
        # carrier's may be tensors the policy keeps (an action it returns every time)
        start.update(start.select(*self.carried).clone())
        return start

    def rewind(self) -> None:
        """The env's outputs where the last batch ended (``last``) into ``root[0]``."""
        used = self._outputs.used
        self.root[0, :used].copy_(self.last[:used])

    @contextmanager
    def allocating(self):
        """The env's new output buffers are the slots, from ``next[0]``, while in this block."""
        self._taken = 0
        with self._outputs.buffers_from(self._slot):
            yield self
        if self._taken != 2 * self._steps:
            raise RuntimeError(f"the env took {self._taken} output buffers in {self._steps} steps, not two per "
                               f"step_and_maybe_reset")

    def _slot(self, buffer: torch.Tensor) -> torch.Tensor:
        k, self._taken = self._taken, self._taken + 1
        if k >= 2 * self._steps:
            raise RuntimeError(f"the env took more than two output buffers per step ({self._steps} steps)")
        if k % 2 == 0:
            return self.next[k // 2]
        return self.root[k // 2 + 1] if k // 2 + 1 < self._steps else self.last

    def stack(self, steps: list[TensorDictBase]) -> TensorDictBase:
        """``TensorDict.maybe_dense_stack(steps, dim=1)``, with views of the slabs for the entries
        that live there (the env's outputs) and a time-major stacked copy for the others (the
        policy's outputs), viewed ``[num_envs, T, ...]``."""
        keys = set(steps[0].keys(True))
        if any(set(td.keys(True)) != keys for td in steps[1:]) or not all(
                isinstance(v, torch.Tensor) for v in steps[0].values(True, True)):
            return TensorDict.maybe_dense_stack(steps, dim=1)
        return self._stack_nested(steps)

    def _stack_nested(self, tds: list[TensorDictBase]) -> TensorDictBase:
        first = tds[0]
        entries = {}
        for key, value in first.items():
            values = [td._get_str(key, None) for td in tds]
            entries[key] = self._stack_nested(values) if isinstance(value, TensorDictBase) else self._stack_leaf(values)
        batch = torch.Size((*first.batch_size[:1], len(tds), *first.batch_size[1:]))
        return TensorDict._new_unsafe(entries, batch_size=batch, device=first.device)

    def _stack_leaf(self, values: list[torch.Tensor]) -> torch.Tensor:
        first = values[0]
        for slab in (self.next, self.root):
            slot, start = slab.stride(0), slab.data_ptr()
            if (first.dim() and start <= first.data_ptr() < start + slab.numel() and not slot % first.element_size()
                    and all(v.data_ptr() == first.data_ptr() + t * slot and v.stride() == first.stride()
                            and v.shape == first.shape and v.dtype == first.dtype for t, v in enumerate(values))):
                return first.as_strided((first.shape[0], len(values), *first.shape[1:]),
                                        (first.stride(0), slot // first.element_size(), *first.stride()[1:]),
                                        first.storage_offset())
        # time-major, as the slabs: a stack along dim 1 writes each step's rows T apart (torch's
        # CatArrayBatchedCopy at ~0.35 TB/s on an H100), along dim 0 in one run
        return torch.stack(values).transpose(0, 1)


class _ActionChecks:
    """Action values checked on the device over a batch (a graph cannot raise half-way): the
    actions the policy writes, against the action specs it sees (``env``'s, transformed or not);
    ``warp``, the WarpEnv underneath, says whether out-of-range values are clamped."""

    def __init__(self, env, warp: WarpEnv):
        self._specs = {key: env.full_action_spec[key] for key in env.action_keys}
        self._keys = list(self._specs)
        self._check_range = not warp.clamps_actions
        self._bad = torch.zeros(len(self._keys), dtype=torch.bool, device=warp.device)

    def note(self, data: TensorDictBase) -> None:
        for i, key in enumerate(self._keys):
            self._bad[i] |= action_violation(data.get(key), self._specs[key], self._check_range)

    def raise_if_any(self) -> None:
        bad = self._bad.tolist()  # the batch's one host sync (check_actions=False has none)
        if any(bad):
            self._bad.zero_()
            keys = ", ".join(repr(k) for k, b in zip(self._keys, bad) if b)
            raise ValueError(
                f"the batch just collected had actions {keys} with NaN, infinite or out-of-spec values; the env "
                f"has taken those steps (a graph cannot stop half-way): reset it before going on. Pass "
                f"check_actions=False to the env to skip this check")


class _RandomActions:
    """TorchRL's ``RandomPolicy`` over ``spec``: the same draws from torch's generator, the same
    values, without the host syncs of ``Bounded.rand`` (it asks the host whether a float draw
    left its bounds before clipping it), so that it can run inside a graph."""

    def __init__(self, spec):
        self.spec = spec

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.spec.keys(True, True):  # Composite.rand's order: the generator's draws match
            leaf = self.spec[key]
            if isinstance(leaf, Bounded) and leaf.dtype in (torch.float, torch.double, torch.half):
                low, high = leaf.space.low, leaf.space.high
                draw = torch.zeros(leaf.shape, dtype=leaf.dtype, device=leaf.device).uniform_() * (high - low) + low
                draw = torch.where(draw > high, high, torch.where(draw < low, low, draw))
            else:
                draw = leaf.rand()
            tensordict.set(key, draw)
        return tensordict


def _release_failed_capture(graph: torch.cuda.CUDAGraph, device: torch.device) -> None:
    """Undo what a capture that raised left behind, so that the process goes on as before it.

    When the capture itself was invalidated (the host waited on the capturing stream: an
    ``.item()``), ``torch.cuda.graph``'s exit raises before torch's CUDA generator leaves
    capture mode, and every later draw is refused ("Offset increment outside graph capture");
    the generator then takes a state of the same seed and offset, out of capture. A capture
    that ended (a Python error raised inside it, a refused host copy) left nothing to undo.
    (Measured on an H100, torch 2.11: the allocator's memory stays intact either way.)"""
    try:
        graph.pool()  # raises unless the capture ended
        return
    except RuntimeError:
        pass
    index = torch.device(device).index
    generator = torch.cuda.default_generators[torch.cuda.current_device() if index is None else index]
    generator.graphsafe_set_state(generator.clone_state())


def _first_error(error: BaseException) -> BaseException:
    """The first exception of ``error``'s chain (what it was raised while handling)."""
    seen = {id(error)}
    while error.__context__ is not None and id(error.__context__) not in seen:
        error = error.__context__
        seen.add(id(error))
    return error


#: Collector's arguments that apply here only at Collector's default, and why
_DEFAULT_ONLY = {
    "max_frames_per_traj": (None, "trajectories end where the env's episodes end (add a time limit to the env)"),
    "init_random_frames": (None, "the policy runs from the first frame (pass policy=None for random actions)"),
    "reset_at_each_iter": (False, "a reset between batches is not part of the captured loop (call env.reset() and "
                                  "a new GraphedCollector)"),
    "reset_when_done": (True, "the env's masked reset is part of every step"),
    "return_same_td": (False, "each batch is a TensorDict of the caller's own"),
    "compile_policy": (None, "the policy is captured as it is, not compiled"),
    "auto_register_policy_transforms": (None, "transforms would wrap the env in a TransformedEnv"),
    "interruptor": (None, "a batch is one replay, which cannot stop half-way"),
    "replay_buffer": (None, "batches are returned, not written to a buffer"),
    "extend_buffer": (True, "batches are returned, not written to a buffer"),
    "set_truncated": (False, "the env's own truncated flags are kept"),
    "use_buffers": (None, "the graph's own buffers are used"),
    "policy_factory": (None, "one policy, in this process"),
    "backend": (None, "one env in this process"), "backend_options": (None, "one env in this process"),
    "num_collectors": (None, "one env in this process"), "sync": (None, "one env in this process"),
    "create_env_kwargs": (None, "the env is given built"),
    "weight_updater": (None, "the graph reads the policy's parameters in place"),
    "weight_sync_schemes": (None, "the graph reads the policy's parameters in place"),
    "weight_recv_schemes": (None, "the graph reads the policy's parameters in place"),
    "track_policy_version": (False, "the graph reads the policy's parameters in place"),
    "worker_idx": (None, "one env in this process"),
    "trajs_per_batch": (None, "batches are [num_envs, frames_per_batch / num_envs]"),
    "trajs_per_write": (None, "batches are returned, not written"),
    "traj_format": (None, "batches are [num_envs, frames_per_batch / num_envs]"),
    "pre_collect_hook": (None, "the batch's steps are one replay"),
    "post_collect_hook": (None, "use postproc"),
    "compact_obs": (False, "each step's observations are kept as the env hands them out"),
}
_NO_OPS = ("no_cuda_sync", "trust_policy", "cudagraph_policy")  # no sync anyway; the policy is in the graph
_DEVICES = ("device", "storing_device", "policy_device", "env_device")


def _collector_options(env, kwargs: dict) -> tuple:
    """Check ``Collector``'s arguments given to a GraphedCollector; -> (postproc, split_trajs)."""
    known = {*_DEFAULT_ONLY, *_NO_OPS, *_DEVICES, "postproc", "split_trajs"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"GraphedCollector got unexpected keyword arguments {unknown}; it takes Collector's "
                        f"arguments: {sorted(known)}")
    for name in _DEVICES:
        value = kwargs.get(name)
        if value is not None and torch.device(value) != env.device and not (
                torch.device(value).type == env.device.type == "cuda" and torch.device(value).index is None):
            raise ValueError(f"{name}={value!r}: a GraphedCollector keeps the policy, the env and its batches "
                             f"on the env's device ({env.device}); move a batch with batch.to(...)")
    for name, (default, why) in _DEFAULT_ONLY.items():
        if name in kwargs and kwargs[name] != default and not (default is None and kwargs[name] in (False, -1, 0)):
            raise ValueError(f"{name}={kwargs[name]!r} does not apply to a GraphedCollector: {why}")
    postproc = kwargs.get("postproc")
    if postproc is not None and not callable(postproc):
        raise TypeError(f"postproc must be callable, got {type(postproc).__name__}")
    split = kwargs.get("split_trajs")
    return postproc, bool(split)


def _positive_int(name: str, value) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _private(key) -> bool:
    return any(k.startswith("_") for k in ((key,) if isinstance(key, str) else key))
