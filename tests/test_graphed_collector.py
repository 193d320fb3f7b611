"""GraphedCollector: the batches of TorchRL's Collector, key for key and bit for bit.

On the CPU (and in the simulator) it runs its loop eagerly; on a GPU each batch after the
first is one CUDA graph replay. Either way, for the same env, policy and seeds, its batches
equal ``torchrl.collectors.Collector``'s, ``("collector", "traj_ids")`` included.
"""
from contextlib import nullcontext

import pytest
import torch
from omegaconf import OmegaConf
from tensordict.nn import TensorDictSequential
from torchrl.collectors import Collector
from torchrl.envs import CatFrames, StepCounter, TransformedEnv

from all_envs import make
from torchrl_warp.graphed_collector import GraphedCollector
from torchrl_warp.host_syncs import forbid_host_syncs
from torchrl_warp.names import SCENARIO_NAMES

#: envs with every kind of action: discrete, MultiCategorical groups, continuous groups, groups that differ
ENV_NAMES = ["cartpole", "tag_scan", "simple_spread", "simple_speaker_listener", "simple_world_comm_discrete"]
ALGO = OmegaConf.create(dict(name="mappo", hidden=[16], reward_scale=1.0, clip_epsilon=0.2, entropy_coeff=0.01,
                             critic_coeff=1.0, gamma=0.99, lmbda=0.95))


def recipe_policy(env, seed=0):
    """The training recipe's actors (one per group) with small networks: sampling policies."""
    from torchrl_warp.recipes.on_policy import GroupAgent

    torch.manual_seed(seed)
    groups = list(env.layout.groups) if env.layout.groups else [None]
    return TensorDictSequential(*[GroupAgent(env, g, ALGO, env.device).actor for g in groups])


def batches(cls, env, policy, n, frames_per_batch, seed=1, forbid=False, **kw):
    """``n`` batches; ``forbid``: those after the first (what a GPU replays from its graph) under
    forbid_host_syncs, with the env's host-side action checks off."""
    if cls is Collector:  # our envs need no policy transforms (torchrl 0.14 warns of an InitTracker)
        kw.update(auto_register_policy_transforms=False, device=env.device)  # its traj ids on the env's device
    if forbid:
        getattr(env, "base_env", env).check_actions = False  # the WarpEnv (under a TransformedEnv too)
    collector = cls(env, policy, frames_per_batch=frames_per_batch, total_frames=n * frames_per_batch, **kw)
    torch.manual_seed(seed)  # after construction: Collector may run the policy once to learn its keys
    iterator = iter(collector)
    out = [next(iterator)]
    with forbid_host_syncs() if forbid else nullcontext():
        out += list(iterator)
    collector.shutdown()
    return out


def assert_same_batches(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.batch_size == b.batch_size
        assert sorted(a.keys(True, True), key=str) == sorted(b.keys(True, True), key=str)
        for k in b.keys(True, True):
            assert a[k].dtype == b[k].dtype, k
            assert a[k].device == b[k].device, k
            assert torch.equal(a[k], b[k]), k


def compare_with_collector(name, policy_kind, device="cpu", n=3, steps=6, **kw):
    """Our batches and Collector's, each from a fresh env seeded alike (ours after the first with no
    host sync: what a graph captures)."""
    results = []
    for cls in (GraphedCollector, Collector):
        env = make(name, seed=5, device=device)
        policy = recipe_policy(env) if policy_kind == "recipe" else None
        results.append(batches(cls, env, policy, n, env.num_envs * steps, forbid=cls is GraphedCollector, **kw))
    assert_same_batches(*results)
    return results[0]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.sim) if n == "tag_scan" else n
                                  for n in ENV_NAMES])
def test_batches_equal_collectors_with_the_recipes_policy(name):
    out = compare_with_collector(name, "recipe")
    assert out[0]["collector", "traj_ids"].shape == out[0].batch_size


@pytest.mark.sim
@pytest.mark.parametrize("name", ["simple_spread"])
def test_batches_equal_collectors_with_random_actions(name):
    compare_with_collector(name, None)


def test_trajectory_ids_follow_the_episodes():
    """Short episodes end inside a batch: each env that ends one takes the next free id."""
    out = compare_with_collector("acrobot", "recipe", n=2, steps=10)  # max_steps=8: episodes end at steps 8 and 16
    ids = torch.cat([b["collector", "traj_ids"] for b in out], dim=1)
    assert ids[:, 0].tolist() == [0, 1, 2]
    assert ids[:, 8].tolist() == [3, 4, 5]  # the envs ended their first episodes together, in env order
    assert ids[:, 16].tolist() == [6, 7, 8]
    assert len(set(ids.flatten().tolist())) == 9


def test_without_trajectory_ids():
    out = compare_with_collector("tag_scan", "recipe", n=2, track_traj_ids=False)
    assert "collector" not in out[0].keys()


def test_each_batch_is_the_callers_own():
    env = make("cartpole", seed=0)
    first, second = batches(GraphedCollector, env, None, 2, env.num_envs * 4)
    kept = first.clone()
    assert_same_batches([first], [kept])  # the second batch did not write into the first
    assert not torch.equal(first["observation"], second["observation"])


def _in_place_batches(name, device, n=4, steps=5):
    """``n`` batches of ``copy_batches=False``, each cloned when handed out, and the batches."""
    env = make(name, seed=5, device=device)
    collector = GraphedCollector(env, recipe_policy(env), frames_per_batch=env.num_envs * steps, total_frames=-1,
                                 copy_batches=False)
    torch.manual_seed(1)
    handed, snapshots = [], []
    for _ in range(n):
        batch = collector.next()
        batch.set("added_by_the_caller", torch.zeros(batch.shape, device=env.device))
        handed.append(batch)
        snapshots.append(batch.clone().exclude("added_by_the_caller"))
    return handed, snapshots


@pytest.mark.parametrize("name", ["cartpole", "tag_scan"])
def test_batches_in_place_are_collectors_batches_and_the_next_one_overwrites_them(name, device="cpu"):
    """copy_batches=False: each batch, as handed out, is Collector's; the next batch is written
    where the last one was (no copy), and what the caller sets on a batch stays its own."""
    handed, snapshots = _in_place_batches(name, device)
    env = make(name, seed=5, device=device)
    assert_same_batches(snapshots, batches(Collector, env, recipe_policy(env), 4, env.num_envs * 5))
    observation = ("observation",) if name == "cartpole" else ("runners", "observation")
    assert handed[2].get(observation).data_ptr() == handed[3].get(observation).data_ptr()  # the same memory
    assert torch.equal(handed[2].get(observation), snapshots[3].get(observation))
    assert not torch.equal(snapshots[2].get(observation), snapshots[3].get(observation))
    assert "added_by_the_caller" not in GraphedCollector.__dict__ and all(
        "added_by_the_caller" not in s.keys() for s in snapshots)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cartpole", "tag_scan"])
def test_batches_in_place_on_the_gpu(name):
    test_batches_in_place_are_collectors_batches_and_the_next_one_overwrites_them(name, device="cuda")


@pytest.mark.parametrize("name", ["cartpole", "simple_speaker_listener"])
def test_env_outputs_are_written_where_the_batch_reads_them(name):
    """After the first batch, the env writes each step's outputs into time-major slabs and the
    batch's env outputs are views of them (no stacking copy); the other entries are stacked."""
    env = make(name, seed=0)
    collector = GraphedCollector(env, recipe_policy(env), frames_per_batch=env.num_envs * 5, total_frames=-1)
    collector.next(), collector.next()
    slabs = collector._graph._slabs
    with torch.no_grad():
        batch = collector._graph._cycle()

    def in_slabs(t):
        return any(s.data_ptr() <= t.data_ptr() < s.data_ptr() + s.numel() for s in (slabs.next, slabs.root))
    for key in env._outputs.hand_out(with_reward=True).keys(True, True):
        assert in_slabs(batch["next", key]), key
    roots = list(env._outputs.hand_out(with_reward=False).keys(True, True))
    assert roots and all(in_slabs(batch[key]) for key in roots)
    assert not any(in_slabs(batch[key]) for key in batch.keys(True, True) if key not in roots and key[0] != "next")
    assert batch.batch_size == (env.num_envs, 5)


def test_trajectory_ends_read_in_one_reduction():
    """Tag's done keys (the env's and each agent's) are its output buffer's run of flags, so a
    step's ends are one reduction over it; a set of keys that is not the whole run is not."""
    from torchrl_warp.graphed_collector import _one_run

    env = make("tag_scan")
    data = env.rand_step(env.reset())
    flags = [data["next", k] for k in env.done_keys]
    run = _one_run(flags)
    assert run.shape == (env.num_envs, 3 + 3 * env.num_agents)
    data["next", "runners", "done"][0, 1] = True  # one runner tagged: its env ended a trajectory
    assert run.any(-1).tolist() == [True, False]
    assert _one_run(flags[:-1]) is None and _one_run([f.clone() for f in flags]) is None


def test_weights_updated_in_place_are_used():
    env = make("cartpole", seed=0)
    policy = recipe_policy(env)
    collector = GraphedCollector(env, policy, frames_per_batch=env.num_envs * 4, total_frames=-1)
    collector.next()
    other = recipe_policy(make("cartpole"), seed=3)
    collector.update_policy_weights_(other)
    for p, q in zip(policy.parameters(), other.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(TypeError, match="no length"):
        len(collector)


def test_refusals_name_the_problem():
    env = make("tag_scan")
    with pytest.raises(TypeError, match="cannot run CatFrames inside its CUDA graph"):
        GraphedCollector(TransformedEnv(env, CatFrames(2, dim=-1, in_keys=[("taggers", "observation")])), None,
                         frames_per_batch=4)
    with pytest.raises(ValueError, match="no multiple of the env's num_envs=2: .* use 6"):
        GraphedCollector(env, None, frames_per_batch=5)
    with pytest.raises(ValueError, match="frames_per_batch must be a positive int"):
        GraphedCollector(env, None, frames_per_batch=0)
    with pytest.raises(ValueError, match="graphs=True needs an env on a CUDA device"):
        GraphedCollector(env, None, frames_per_batch=4, graphs=True)
    with pytest.raises(TypeError, match="WarpEnv"):
        GraphedCollector(object(), None, frames_per_batch=4)


# ----- on a GPU: graphs ------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", ENV_NAMES + ["acrobot", "tag_gridworld"])
def test_graphed_batches_equal_collectors_on_the_gpu(name):
    out = compare_with_collector(name, "recipe", device="cuda", n=4)
    assert out[0].device.type == "cuda"


@pytest.mark.gpu
def test_graphed_random_actions_equal_collectors_on_the_gpu():
    compare_with_collector("tag_grid", None, device="cuda", n=4)


@pytest.mark.gpu
def test_a_change_under_the_graph_builds_a_new_one():
    """Reseeding the env or replacing the policy's parameters between batches: the graph
    would replay the old ones, so the collector notices and builds a new graph."""
    results = []
    for cls in (GraphedCollector, Collector):
        env = make("tag_scan", seed=5, device="cuda")
        policy = recipe_policy(env)
        kw = dict(auto_register_policy_transforms=False, device=env.device) if cls is Collector else {}
        collector = cls(env, policy, frames_per_batch=env.num_envs * 5, total_frames=-1, **kw)
        torch.manual_seed(1)
        it, out = iter(collector), []
        out += [next(it), next(it), next(it)]
        env.set_seed(9)
        out += [next(it), next(it)]
        for p in policy.parameters():  # new tensors, not an in-place update
            p.data = p.data * 0.5
        out += [next(it), next(it), next(it)]
        env.rollout(3)  # stepped outside the collector
        out += [next(it), next(it)]
        collector.shutdown()
        results.append(out)
    assert_same_batches(*results)


@pytest.mark.gpu
def test_invalid_actions_in_a_graph_raise_after_the_batch():
    env = make("cartpole", seed=0, device="cuda")  # check_actions=True by default
    bad = torch.zeros((), device="cuda")

    def policy(td):
        return td.set("action", torch.zeros_like(td["observation"][..., 0], dtype=torch.int64) + 2 * (bad > 0))

    collector = GraphedCollector(env, policy, frames_per_batch=env.num_envs * 3, total_frames=-1)
    collector.next(), collector.next(), collector.next()  # eager, captured, replayed: all fine
    bad.fill_(1.0)  # the policy now writes action 2, outside Categorical(2)
    with pytest.raises(ValueError, match="actions 'action' with NaN, infinite or out-of-spec values"):
        collector.next()


def _failing_policy(env, how):
    """A policy a graph cannot capture: it waits for the host (``item``) or copies host memory
    to the GPU (``copy``)."""
    def policy(td):
        if how == "item" and td["observation"].sum().item() > 1e9:
            pass
        shift = torch.tensor([0], device="cuda") if how == "copy" else 0
        return td.set("action", torch.zeros(env.num_envs, dtype=torch.int64, device="cuda") + shift)
    return policy


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["item", "copy"])
def test_a_failed_capture_leaves_the_process_usable(how):
    """A policy the graph cannot capture is refused with the capture's error, the env has not
    stepped, and then, in the same process: that collector goes on eagerly, memory allocated
    before stays intact, torch's CUDA generator draws, and a new capture gives Collector's batches."""
    env = make("cartpole", seed=0, device="cuda")
    collector = GraphedCollector(env, _failing_policy(env, how), frames_per_batch=env.num_envs * 3, total_frames=-1)
    assert collector.next().batch_size == (env.num_envs, 3)  # the first batch runs eagerly
    before, kept = env.state.clone(), torch.full((1 << 16,), 7.0, device="cuda")
    with pytest.raises(RuntimeError, match="could not capture a batch of CartPoleEnv with policy function as a "
                                           r"CUDA graph [(]\w*Error: .* graphs=False"):
        collector.next()  # the capture of the second batch
    for key in before.keys(True, True):
        assert torch.equal(env.state[key], before[key]), key  # the env did not step
    collector.graphs = False  # eager batches go on
    assert collector.next().batch_size == (env.num_envs, 3)
    import gc
    gc.collect()
    torch.cuda.empty_cache()
    after = torch.full((1 << 16,), 3.0, device="cuda")  # not from the failed graph's pool
    assert bool((kept == 7.0).all()) and bool((after == 3.0).all())
    torch.manual_seed(0)
    first = torch.rand(3, device="cuda")
    torch.manual_seed(0)
    assert torch.equal(torch.rand(3, device="cuda"), first)
    compare_with_collector("tag_scan", None, device="cuda", n=3)  # a new capture (asserted below) works
    again = GraphedCollector(make("cartpole", seed=1, device="cuda"), None, frames_per_batch=env.num_envs * 3)
    again.next(), again.next()
    assert again._graph is not None and again._graph._graph is not None


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cartpole", "tag_scan"])
def test_batches_handed_out_stay_as_they_were_through_later_replays(name):
    """A replay writes the graph's own buffers only, never memory a batch handed out lives in."""
    env = make(name, seed=5, device="cuda")
    collector = GraphedCollector(env, recipe_policy(env), frames_per_batch=env.num_envs * 6, total_frames=-1)
    kept, snapshots = [], []
    for _ in range(5):
        batch = collector.next()
        kept.append(batch)
        snapshots.append(batch.clone())
    assert_same_batches(kept, snapshots)


def test_the_how_it_works_example_runs_as_written(capsys):
    """docs/how_it_works.md's GraphedCollector example: two batches of [4, 10], ids per env."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "how_it_works.md").read_text()
    section = text.split("## Whole batches as CUDA graphs", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    exec(compile(code, "how_it_works.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("torch.Size([4, 10]) tensor([0, 1, 2, 3]")
    assert len(lines) == 2 and lines[1].startswith("torch.Size([4, 10]) tensor([")


def test_collectors_arguments_are_taken_or_refused_by_name():
    """A Collector(...) call takes GraphedCollector by its name: postproc and split_trajs as
    Collector applies them, devices and no-ops accepted, the rest refused saying why."""
    calls = []

    def postproc(batch):
        calls.append(batch.batch_size)
        return batch.set("seen", torch.ones(batch.batch_size))

    results = []
    for cls in (GraphedCollector, Collector):
        env = make("acrobot", seed=5)  # episodes of 8 steps: a batch of 10 steps splits
        kw = dict(frames_per_batch=env.num_envs * 10, total_frames=env.num_envs * 20)
        extra = dict(auto_register_policy_transforms=False) if cls is Collector else {}
        collector = cls(env, recipe_policy(env), device=env.device, storing_device="cpu", no_cuda_sync=True,
                        split_trajs=True, postproc=postproc, **kw, **extra)
        torch.manual_seed(1)
        results.append(list(collector))
    assert_same_batches(*results)
    assert results[0][0].batch_size[0] > env.num_envs and "seen" in results[0][0].keys()  # split by trajectory, post-processed
    assert calls[0] == results[0][0].batch_size

    env = make("cartpole", seed=0)
    for bad, match in [(dict(reset_at_each_iter=True), "reset_at_each_iter=True does not apply.*a reset between"),
                       (dict(max_frames_per_traj=5), "max_frames_per_traj=5 does not apply"),
                       (dict(storing_device="meta"), "storing_device='meta'.*on the env's device"),
                       (dict(split_trajs=True, track_traj_ids=False), "split_trajs=True .* needs track_traj_ids")]:
        with pytest.raises(ValueError, match=match):
            GraphedCollector(env, None, frames_per_batch=env.num_envs * 2, **bad)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['frames_per_batches'\]"):
        GraphedCollector(env, None, frames_per_batch=env.num_envs * 2, frames_per_batches=3)


@pytest.mark.gpu
@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_random_action_batches_are_captured_at_the_benchmarks_sizes(name):
    """The bench's ``graphed`` mode for every MPE scenario at 1,000 envs: the second batch is
    captured and replayed, and the batches go on from each other (the env keeps stepping)."""
    from torchrl_warp.bench import make_env

    env = make_env(name, 1000, "cuda")  # 25-step episodes: each batch of 30 steps ends mid-episode
    collector = GraphedCollector(env, None, frames_per_batch=env.num_envs * 30, total_frames=-1)
    first, second, third = collector.next(), collector.next(), collector.next()
    assert collector._graph is not None and collector._graph._graph is not None  # captured
    went_on = ~first["next", "done"][:, -1].flatten()
    assert went_on.any()
    for key in env.observation_spec.keys(True, True):
        assert torch.isfinite(third["next", key]).all(), key
        assert torch.equal(second[key][went_on, 0], first["next", key][went_on, -1]), key
        assert not torch.equal(second[key], third[key]), key


@pytest.mark.gpu
def test_a_capture_is_not_invalidated_by_numba_freeing_what_it_owned():
    """Numba frees its device memory in batches, whenever the garbage collector gets to it:
    a batch flushed inside a capture (``cuMemFree``) invalidated it, so captures failed or
    not by what earlier tests left behind. Here the policy drops 50 Numba allocations inside
    the capture: it succeeds, and the memory is freed afterwards."""
    from numba import cuda

    env = make("cartpole", seed=0, device="cuda")
    owned = [cuda.device_array(1 << 10) for _ in range(50)]
    pending = cuda.current_context().memory_manager.deallocations  # device memory's queue

    def policy(td):
        if torch.cuda.is_current_stream_capturing():
            owned.clear()  # 50 frees queued inside the capture: more than Numba lets wait
        return td.set("action", torch.zeros(env.num_envs, dtype=torch.int64, device="cuda"))

    collector = GraphedCollector(env, policy, frames_per_batch=env.num_envs * 3, total_frames=-1)
    collector.next(), collector.next()  # eager, then captured
    assert collector._graph is not None and collector._graph._graph is not None and not owned
    assert len(pending) >= 50  # held until the capture ended
    cuda.device_array(1 << 10)  # the next free Numba meets flushes them
    collector.next()
    assert len(pending) < 50


@pytest.mark.gpu
def test_a_capture_is_not_invalidated_by_the_garbage_collector():
    """Python's cyclic collector runs at any allocation and frees what earlier code left in
    reference cycles; a ``CUDAGraph`` freed inside a capture (its destructor) invalidated it.
    Here a cycle holding a captured graph becomes garbage inside the capture, with the
    collector set to run at every allocation: the capture succeeds, the graph is freed after."""
    import gc

    env = make("cartpole", seed=0, device="cuda")
    spare, y = torch.cuda.CUDAGraph(), torch.zeros(4, device="cuda")
    with torch.cuda.graph(spare):
        y.add_(1)
    spares = [spare]
    del spare
    freed = []

    def policy(td):
        if torch.cuda.is_current_stream_capturing() and spares:
            cycle = {"graph": spares.pop()}
            cycle["self"] = cycle  # garbage that only the cyclic collector frees
            import weakref
            freed.append(weakref.ref(cycle["graph"]))
            del cycle
            for _ in range(1000):
                [[]]  # allocations: the collector would run at each
        return td.set("action", torch.zeros(env.num_envs, dtype=torch.int64, device="cuda"))

    collections = []  # per collection of the cyclic collector: whether a capture was on

    def note(phase, info):
        if phase == "start":
            collections.append(torch.cuda.is_current_stream_capturing())

    threshold = gc.get_threshold()
    gc.set_threshold(1)
    gc.callbacks.append(note)
    try:
        collector = GraphedCollector(env, policy, frames_per_batch=env.num_envs * 3, total_frames=-1)
        collector.next(), collector.next()  # eager, then captured
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*threshold)
    assert collector._graph is not None and collector._graph._graph is not None
    # the collector ran, but never inside the capture (after it, it may free the cycle at once)
    assert freed and collections and not any(collections), collections
    gc.collect()
    assert freed[0]() is None
    collector.next()


@pytest.mark.parametrize("name", ["tag_scan", "cartpole"])
def test_the_tensors_a_policy_returns_are_never_written(name):
    """A policy may hand out tensors it keeps (here a pool of actions, taken in turn): the
    collector writes none of them (it once wrote each batch's last action into the one the
    policy had returned last), and every step acts with the pool's next action."""
    env = make(name, seed=0)
    pool = [env.full_action_spec.rand() for _ in range(3)]
    kept = [action.clone() for action in pool]
    calls = []

    def policy(tensordict):
        calls.append(None)
        return tensordict.update(pool[(len(calls) - 1) % len(pool)])

    collector = GraphedCollector(env, policy, frames_per_batch=env.batch_size[0] * 4, total_frames=-1)
    steps = [step for _ in range(3) for step in collector.next().unbind(1)]
    for action, before in zip(pool, kept):
        assert (action == before).all()
    for t, step in enumerate(steps):
        assert (step.select(*kept[0].keys(True, True)) == kept[t % len(kept)]).all(), f"step {t}"


@pytest.mark.parametrize("name", ["tag_scan", "cartpole", "simple_spread"])
@pytest.mark.parametrize("transformed", [False, True], ids=["bare", "transformed"])
@pytest.mark.parametrize("kept_at", [1, 2, 3])
def test_a_view_the_caller_keeps_is_never_overwritten(name, transformed, kept_at, device="cpu"):
    """copy_batches=True hands out a lane's memory as it is: a view the caller keeps of one
    batch (the batch itself let go) stays as it was while the loop goes on."""
    env = make(name, seed=0, device=device)
    if transformed:
        env = TransformedEnv(env, StepCounter())
    collector = GraphedCollector(env, recipe_policy(env), frames_per_batch=env.batch_size[0] * 5, total_frames=-1)
    kept = []
    for i, batch in zip(range(8), collector):
        if i == kept_at:
            kept = [(key, batch[key][:, 1], batch[key][:, 1].clone()) for key in batch.keys(True, True)]
        for key, view, value in kept:
            assert torch.equal(view, value), f"{key} of batch {kept_at} overwritten by batch {i}"
    assert len(collector._lanes) == GraphedCollector.LANES  # batches were handed out uncopied


def test_the_lanes_go_on_from_each_others_batches(device="cpu"):
    """Lanes taken in turn (the caller lets each batch go when it asks for the next after it):
    each batch starts where the last one, of either lane, ended (the env's outputs and the
    carried entries: trajectory ids), as one graph's batches do. Episodes of 8 steps end
    inside batches of 3, so the trajectory ids move on in every lane."""
    def batches(collector, n=9):
        torch.manual_seed(5)
        return [batch.clone() for _, batch in zip(range(n), collector)]

    env = make("tag_scan", seed=0, device=device)
    collector = GraphedCollector(env, recipe_policy(env), frames_per_batch=env.batch_size[0] * 3, total_frames=-1,
                                 track_traj_ids=True)
    ours = batches(collector)
    reference = make("tag_scan", seed=0, device=device)
    theirs = batches(GraphedCollector(reference, recipe_policy(reference), frames_per_batch=env.batch_size[0] * 3,
                                      total_frames=-1, track_traj_ids=True, copy_batches=False))
    assert len(collector._lanes) == GraphedCollector.LANES and not collector._own  # the lanes alternated
    ids = ("collector", "traj_ids")
    assert ours[-1][ids].max() > ours[0][ids].max()  # trajectories ended and began
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for key in b.keys(True, True):
            assert torch.equal(a[key], b[key]), f"batch {i}: {key}"


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["tag_scan", "simple_spread"])
@pytest.mark.parametrize("transformed", [False, True], ids=["bare", "transformed"])
def test_a_view_the_caller_keeps_of_a_captured_lane_is_never_overwritten(name, transformed):
    """The captured lanes: what a replay writes is the graph's, so a view the caller keeps is
    seen only through the counted references (taken once, after the capture)."""
    for kept_at in (1, 2, 3):
        test_a_view_the_caller_keeps_is_never_overwritten(name, transformed, kept_at, device="cuda")


@pytest.mark.gpu
def test_the_captured_lanes_go_on_from_each_others_batches():
    test_the_lanes_go_on_from_each_others_batches(device="cuda")
