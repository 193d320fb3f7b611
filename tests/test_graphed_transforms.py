"""GraphedCollector over a TransformedEnv: TorchRL's transforms inside the graph.

Every transform of ``CAPTURABLE`` gives ``Collector``'s batches bit for bit with no host
sync in the whole loop (``forbid_host_syncs`` around the collector); every other transform
that applies to our envs is refused by name, and ``REFUSED`` says why, which
``test_each_refusal_is_needed`` shows: with the transform let through, the loop asks the
host, or its batches are not Collector's. The transforms are built as
``tests/test_transforms.py`` builds them for each env.
"""
import pytest
import torch
import torchrl.envs.transforms as T
from torchrl.collectors import Collector
from torchrl.envs import Compose, RewardSum, StepCounter, TransformedEnv

from all_envs import ENVS, make
from test_graphed_collector import assert_same_batches, batches, recipe_policy
from test_transforms import APPLICABLE, DEFAULT_ENVS, _base
from torchrl_warp import transformed_step
from torchrl_warp.graphed_collector import GraphedCollector
from torchrl_warp.host_syncs import HostSyncError, forbid_host_syncs
from torchrl_warp.transformed_step import CAPTURABLE

SYNCS, DIFFERS, ELSE = "asks the host", "differs from Collector", "refused for another reason"
#: the applicable transforms that GraphedCollector refuses: what goes wrong in a graph, and how
REFUSED = {
    "ActionMask": (DIFFERS, "the mask it writes into the env's action spec is not the spec random actions see"),
    "BatchSizeTransform": (ELSE, "it changes the env's batch size; a batch is [num_envs, T]"),
    "CatFrames": (SYNCS, "its reset asks whether every env reset"),
    "ConditionalPolicySwitch": (SYNCS, "it asks the host whether to switch"),
    "ConditionalSkip": (SYNCS, "it asks the host which envs skip"),
    "DiscreteActionProjection": (SYNCS, "it asks the host whether any action is out of range"),
    "DeviceCastTransform": (ELSE, "it moves data between devices: on a GPU a host copy, which a graph cannot hold"),
    "FiniteTensorDictCheck": (SYNCS, "it checks on the host that every entry is finite"),
    "MacroPrimitiveTransform": (SYNCS, "it steps the env with TorchRL's generic reset inside"),
    "MeanActionSelector": (SYNCS, "its spec projection asks the host"),
    "MultiAction": (SYNCS, "it steps the env with TorchRL's generic reset inside"),
    "NextObservationDelta": (DIFFERS, "it rewrites the next observations that the reset merge reads"),
    "PinMemoryTransform": (ELSE, "it copies into pinned host memory, which a graph on the device cannot hold"),
    "RandomTruncationTransform": (SYNCS, "it asks the host whether any env truncates"),
    "TensorDictPrimer": (SYNCS, "its reset asks whether any env reset"),
    "TimeMaxPool": (SYNCS, "its reset asks whether every env reset"),
    "Timer": (DIFFERS, "it records wall-clock times"),
    "TrajCounter": (SYNCS, "it counts trajectories on the host"),
    "VecNorm": (DIFFERS, "its reset updates the statistics from every env's reset data, reset or not"),
    "VecNormV2": (SYNCS, "it asks the host whether its statistics are initialised"),
    "gSDENoise": (SYNCS, "its reset asks whether any env reset"),
}
CONTAINERS = {"Compose"}  # flattened: its transforms decide


def test_every_applicable_transform_is_taken_or_refused_with_a_reason():
    taken = {t.__name__ for t in CAPTURABLE}
    assert not taken & set(REFUSED)
    assert set(APPLICABLE) == taken | set(REFUSED) | CONTAINERS


def _pairs(names, every_env=False):
    """(transform, env): on each of DEFAULT_ENVS where it applies (else of all envs), or (default
    run) one of them."""
    pairs = []
    for i, name in enumerate(sorted(names)):
        envs = [e for e in DEFAULT_ENVS if APPLICABLE[name].applies(_base(e))] or [
            e for e in ENVS if APPLICABLE[name].applies(_base(e))]
        if not envs:
            continue  # applies nowhere on this machine (PinMemoryTransform without CUDA)
        envs = envs if every_env else envs[i % len(envs):][:1]  # rotate the envs over the transforms
        pairs += [(name, e) for e in envs]
    return pairs


def transformed(name, env_name, device="cpu"):
    torch.manual_seed(0)  # a case's setup may draw (ObservationNorm's statistics)
    base = make(env_name, seed=3, device=device)
    env = TransformedEnv(base, APPLICABLE[name].build(base))
    if APPLICABLE[name].setup is not None:
        APPLICABLE[name].setup(env)
    return env


def collect(cls, env, n=3, steps=7, forbid=False, policy=None):
    """``n`` batches of ``steps`` steps (``forbid``: see test_graphed_collector.batches)."""
    return batches(cls, env, policy, n, env.base_env.num_envs * steps, forbid=forbid)


def compare(name, env_name, device="cpu", forbid=True):
    results = []
    for cls in (GraphedCollector, Collector):
        env = transformed(name, env_name, device)
        policy = APPLICABLE[name].policy(env) if APPLICABLE[name].policy is not None else None
        results.append(collect(cls, env, forbid=forbid and cls is GraphedCollector, policy=policy))
    assert_same_batches(*results)


CAPTURABLE_NAMES = sorted(n for n in APPLICABLE if getattr(T, n, None) in CAPTURABLE)


@pytest.mark.parametrize("name,env_name", _pairs(CAPTURABLE_NAMES))
def test_capturable_transforms_give_collectors_batches_without_host_syncs(name, env_name):
    compare(name, env_name)


@pytest.mark.slow
@pytest.mark.parametrize("name,env_name", _pairs(CAPTURABLE_NAMES, every_env=True))
def test_capturable_transforms_on_every_env_where_they_apply(name, env_name):
    compare(name, env_name)


@pytest.mark.parametrize("name,env_name", _pairs(REFUSED))
def test_other_transforms_are_refused_by_name(name, env_name):
    env = transformed(name, env_name)
    with pytest.raises(TypeError, match=f"cannot run (.*, )?{name}(, .*)? inside its CUDA graph"):
        GraphedCollector(env, None, frames_per_batch=env.base_env.num_envs)


@pytest.mark.parametrize("name,env_name", _pairs(n for n, (why, _) in REFUSED.items() if why != ELSE))
def test_each_refusal_is_needed(name, env_name, monkeypatch):
    """Let the transform through: the loop asks the host, or its batches are not Collector's."""
    case = transformed(name, env_name)
    let_through = tuple({type(t) for t in transformed_step.transforms_of(case)})  # a case may compose several
    monkeypatch.setattr(transformed_step, "CAPTURABLE", CAPTURABLE + let_through)
    why, _ = REFUSED[name]
    with pytest.raises(HostSyncError if why == SYNCS else AssertionError):
        compare(name, env_name, forbid=why == SYNCS)


@pytest.mark.parametrize("env_name", ["cartpole", "tag_scan"])
def test_the_masked_step_is_torchrls_step_by_step(env_name):
    """transformed_step.step_and_maybe_reset against TorchRL's, entry by entry, both returns
    (the carried action included): steps where some envs reset and steps where all do."""
    def make_env():
        base = make(env_name, seed=3)
        return TransformedEnv(base, Compose(RewardSum(in_keys=base.reward_keys), StepCounter(max_steps=4)))

    ours, theirs = make_env(), make_env()
    ours.base_env.check_actions = False
    a, b = ours.reset(), theirs.reset()
    kinds = set()
    for t in range(12):
        if t == 6:  # env 0 starts over: its time limit falls apart from the others'
            first = torch.zeros(ours.base_env.num_envs, 1, dtype=torch.bool)
            first[0] = True
            a, b = ours.reset(a.set("_reset", first)), theirs.reset(b.set("_reset", first.clone()))
        torch.manual_seed(t)
        action = ours.rand_action(a.clone()).select(*ours.action_keys)
        a.update(action)
        b.update(action.clone())
        with forbid_host_syncs():
            a_data, a = transformed_step.step_and_maybe_reset(ours, a)
        b_data, b = theirs.step_and_maybe_reset(b)
        for x, y in ((a_data, b_data), (a, b)):
            assert set(x.keys(True, True)) == set(y.keys(True, True))
            for key in y.keys(True, True):
                assert torch.equal(x[key], y[key]), (t, key)
        done = b_data["next", "done"]
        kinds.add("all" if done.all() else "some" if done.any() else "none")
    assert kinds == {"all", "some", "none"}


def test_a_recipe_policy_with_the_usual_transforms():
    """RewardSum and StepCounter (a time limit shorter than the env's) under the recipe's sampling
    policy, over Tag's two groups: Collector's batches, without a host sync."""
    results = []
    for cls in (GraphedCollector, Collector):
        base = make("tag_scan", seed=5)
        env = TransformedEnv(base, Compose(RewardSum(in_keys=base.reward_keys), StepCounter(max_steps=5)))
        results.append(collect(cls, env, n=3, steps=6, forbid=cls is GraphedCollector, policy=recipe_policy(base)))
    assert_same_batches(*results)
    truncated = results[0][1]["next", "truncated"].squeeze(-1)
    assert truncated.any() and (results[0][1]["next", "step_count"].squeeze(-1)[truncated] == 5).all()


def test_a_transformed_env_over_another_env_is_refused():
    from torchrl.envs import PendulumEnv  # TorchRL's own: no WarpEnv

    with pytest.raises(TypeError, match="over a torchrl_warp WarpEnv, got one over PendulumEnv"):
        GraphedCollector(TransformedEnv(PendulumEnv(), StepCounter()), None, frames_per_batch=3)


@pytest.mark.sim
@pytest.mark.parametrize("name,env_name", [("RewardSum", "speakers"), ("ObservationNorm", "tag_scan"),
                                           ("StepCounter", "simple_speaker_listener")])
def test_transforms_in_the_simulator(name, env_name):
    compare(name, env_name)


@pytest.mark.gpu
@pytest.mark.parametrize("name,env_name", _pairs(CAPTURABLE_NAMES))
def test_capturable_transforms_are_captured_on_the_gpu(name, env_name):
    """On a GPU the batches are replayed from a CUDA graph (capture fails on a host sync)."""
    env = transformed(name, env_name, device="cuda")
    collector = GraphedCollector(env, None, frames_per_batch=env.base_env.num_envs * 7, total_frames=-1)
    torch.manual_seed(1)
    ours = [collector.next() for _ in range(3)]
    assert collector._graph is not None and collector._graph._graph is not None
    theirs = collect(Collector, transformed(name, env_name, device="cuda"))
    assert_same_batches(ours, theirs)


def test_the_docs_list_what_is_taken_and_what_is_refused():
    """docs/environments.md's "Inside GraphedCollector": its list is CAPTURABLE, its table REFUSED."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "environments.md").read_text()
    section = text.split("### Inside `GraphedCollector`", 1)[1].split("\n## ", 1)[0]
    listed, table = section.split("| transform |", 1)
    names = lambda part: set(re.findall(r"`([A-Za-z0-9]+)`", part)) & set(APPLICABLE)  # noqa: E731
    assert names(listed) == {t.__name__ for t in CAPTURABLE}
    assert names(table) == set(REFUSED)


def test_a_captured_rollout_keeps_the_envs_output_buffers():
    """What a capture runs (``keep`` given): every output buffer the env took stays referenced,
    two per step, even where a transform drops every view of one (ExcludeTransform here)."""
    base = make("cartpole", seed=3)
    env = TransformedEnv(base, T.ExcludeTransform("observation"))
    collector = GraphedCollector(env, None, frames_per_batch=base.num_envs * 4)
    keep = []
    collector._rollout(collector._carrier, keep=keep)
    buffers = [t for t in keep if isinstance(t, torch.Tensor)]
    assert len(buffers) == 2 * 4 and len({b.data_ptr() for b in buffers}) == 8
    assert all(b.shape == base._outputs.base.shape for b in buffers)
