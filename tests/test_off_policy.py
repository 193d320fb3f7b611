"""The off-policy actor-critic recipes (recipes/off_policy.py over recipes/replay.py): DDPG, SAC,
IDDPG, MADDPG, ISAC, MASAC. Each trains, evaluates, checkpoints and resumes at tiny sizes; the
target networks follow SoftUpdate / HardUpdate; the replay buffer returns what was written, on
the env's device; a gradient step and a buffer sample ask nothing of the host; bad configs are
refused before any work; MADDPG and MASAC learn simple_spread with one agent in seconds.

The runs call ``train`` in this process, as tests/test_recipe_mpe.py's do (Numba compiles each
MPE env's kernels once per process), with one torch thread: on a busy 2-core machine torch's
second thread made each small op ~100x slower (a fused Adam step of a 64x64 MLP: 39 ms against
0.12 ms).
"""
import math
import os

import pytest
import torch

from conftest import SIM
from test_recipe_config import compose, no_work, run_cli  # noqa: F401  (a fixture)
from test_recipe_mpe import scalars_of

pytestmark = pytest.mark.skipif(SIM, reason="training runs on the CPU backend, not in the simulator")

#: simple_spread (env/mpe.yaml's: 25 steps, continuous actions) at tiny sizes: 2 batches of 40
#: frames, a gradient step per 10 frames (4 a batch), minibatches of 20
TINY_MPE = ("env=mpe", "device=cpu", "env.num_envs=4", "env.steps_per_batch=10", "env.total_frames=80",
            "algo.hidden=[16,16]", "algo.minibatch_size=20", "algo.frames_per_gradient_step=10",
            "algo.buffer_size=1000", "eval_envs=4", "checkpoint_every=1")
TINY_PENDULUM = ("env=pendulum", *TINY_MPE[1:])
#: each algorithm on its smallest env
TINY = {"ddpg": TINY_PENDULUM, "sac": TINY_PENDULUM, "iddpg": TINY_MPE, "maddpg": TINY_MPE, "isac": TINY_MPE,
        "masac": TINY_MPE}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run(tmp_path, *overrides):
    from torchrl_warp.recipes.train import train

    return train(compose(*overrides), str(tmp_path))


def adam_steps(ckpt) -> list:
    return [s["step"].item() for s in ckpt["optimizer"]["state"].values()]


def restored_agents(path):
    """The networks of the checkpoint at ``path``, as a run resuming from it builds and restores them."""
    from torchrl_warp.recipes.checkpoint import load_checkpoint, restore
    from torchrl_warp.recipes.common import env_defaults, make_env
    from torchrl_warp.recipes.config import train_schema
    from torchrl_warp.recipes.replay import make_optimizer
    from torchrl_warp.recipes.train import family
    from omegaconf import OmegaConf

    saved = torch.load(path, weights_only=True)["config"]
    cfg = OmegaConf.merge(train_schema(saved["algo"]["name"]), saved)
    env = make_env(cfg, torch.device("cpu"), cfg.env.num_envs, cfg.seed)
    groups = list(env.layout.groups) if env.layout.groups else [None]
    agents = family(cfg.algo.name).build_agents(cfg, env, groups, torch.device("cpu"))
    restore(load_checkpoint(str(path), cfg, env_defaults(cfg)), str(path), agents, make_optimizer(cfg, agents, "cpu"))
    return agents


def trains_evaluates_checkpoints_and_resumes(tmp_path, algo, tiny, losses, group):
    """The tiny run of ``algo`` and its resumed continuation, checked (shared with
    tests/test_value_decomposition.py)."""
    summary = run(tmp_path / "a", f"algo={algo}", *tiny)
    assert summary["algo"] == algo and summary["frames"] == 80 and summary["gradient_steps"] == 8  # 80 / 10
    evaluation = [k for k in summary if k.startswith("eval_return")]
    assert evaluation and all(math.isfinite(summary[k]) for k in evaluation), summary
    scalars = scalars_of(tmp_path / "a")
    for loss in losses:
        values = scalars[f"{loss}/{group}"]
        assert len(values) == 2 and all(math.isfinite(v) for v in values), (loss, values)
    assert scalars["gradient_steps"] == [4, 4] and scalars["buffer_frames"] == [40, 80]
    ckpt_path = tmp_path / "a" / "checkpoint.pt"
    first = torch.load(ckpt_path, weights_only=True)
    assert first["iteration"] == 2 and first["config"]["algo"]["name"] == algo
    assert set(adam_steps(first)) == {8.0}
    targets = [k for k in first["agents"] if ".target_" in k]
    assert targets, "the target networks are saved"
    # the checkpoint's networks, targets included, come back as they were saved (not copied from
    # the online networks anew by the target updater)
    restored = restored_agents(ckpt_path).state_dict()
    for k in targets:
        torch.testing.assert_close(restored[k], first["agents"][k], rtol=0, atol=0)
    online = k.replace("target_", "")
    assert not torch.equal(first["agents"][online], first["agents"][k])  # the targets lag the online networks
    resumed = run(tmp_path / "b", f"algo={algo}", *tiny, "env.total_frames=160", f"resume={ckpt_path}")
    assert (resumed["frames"], resumed["frames_this_run"], resumed["gradient_steps"]) == (160, 80, 8)
    second = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    assert second["iteration"] == 4 and set(adam_steps(second)) == {16.0}  # Adam's steps went on
    # the replay buffer and the gradient step count went on too
    assert first["family"]["gradient_steps"] == 8 and second["family"]["gradient_steps"] == 16
    assert scalars_of(tmp_path / "b")["buffer_frames"] == [120, 160]
    return summary, scalars


@pytest.mark.parametrize("algo", list(TINY))
def test_each_algorithm_trains_evaluates_checkpoints_and_resumes(tmp_path, algo):
    losses = ("loss_actor", "loss_value") if "ddpg" in algo else ("loss_actor", "loss_qvalue", "loss_alpha", "alpha")
    group = "agent" if algo in ("ddpg", "sac") else "agents"
    tiny = TINY[algo] + (("algo.sigma_anneal_frames=80",) if "ddpg" in algo else ())
    summary, scalars = trains_evaluates_checkpoints_and_resumes(tmp_path, algo, tiny, losses, group)
    if "ddpg" in algo:  # the exploration noise falls linearly with the frames done: 1 -> 0.1 over 80
        assert scalars[f"sigma/{group}"] == pytest.approx([0.55, 0.1])
    if group == "agents":
        assert math.isfinite(summary["eval_gap_closed_deterministic/agents"])


def test_the_first_frames_are_random_and_train_nothing(tmp_path):
    """``algo.init_random_frames=40``: the first batch's actions are uniform-random (not the
    actor's), no gradient step follows it; the frames after it bring theirs (40 / 10)."""
    from torchrl_warp.recipes import replay

    seen = []
    extend = replay.ReplayBuffer.extend

    def spy(self, data, *args, **kwargs):
        seen.append(data["action"].clone())
        return extend(self, data, *args, **kwargs)

    replay.ReplayBuffer.extend = spy
    try:
        summary = run(tmp_path, "algo=ddpg", *TINY_PENDULUM, "algo.init_random_frames=40", "algo.sigma_init=0.0",
                      "algo.sigma_end=0.0")
    finally:
        replay.ReplayBuffer.extend = extend
    assert summary["gradient_steps"] == 4 and scalars_of(tmp_path)["gradient_steps"] == [0, 4]
    random, acted = seen
    # Pendulum's actions are in [-2, 2]: uniform draws spread over it; the untrained actor's
    # (noise off) are a smooth function of the observation, the same for equal observations
    assert random.min() < -1 and random.max() > 1 and random.std() > 0.9
    assert acted.std() < random.std()


def test_play_loads_an_off_policy_checkpoint(tmp_path):
    """recipes/play.py rebuilds a SAC run's networks from its checkpoint (its config in SAC's
    schema) and records a video of the trained actor."""
    from torchrl_warp.recipes.play import main

    run(tmp_path, "algo=sac", *TINY_PENDULUM)
    result = main([f"checkpoint={tmp_path / 'checkpoint.pt'}", f"out={tmp_path / 'play.gif'}", "steps=3",
                   "resolution=64", "device=cpu"])
    assert result["frames"] == 4 and (tmp_path / "play.gif").stat().st_size > 0


def test_simple_tag_trains_one_group_and_holds_the_other(tmp_path):
    """Heterogeneous groups (simple_tag's adversaries and good agent: 16 and 14 floats of
    observation), one actor, critics and loss each; ``algo.train_groups=[agent]`` updates the
    good agent only, the adversaries act with their networks unchanged."""
    overrides = ("algo=masac", *TINY_MPE, "env.scenario=simple_tag", "algo.train_groups=[agent]")
    run(tmp_path / "a", *overrides)
    run(tmp_path / "b", *overrides, "env.total_frames=160", f"resume={tmp_path / 'a' / 'checkpoint.pt'}")
    first, second = (torch.load(tmp_path / r / "checkpoint.pt", weights_only=True) for r in "ab")
    scalars = scalars_of(tmp_path / "b")
    assert "loss_qvalue/agent" in scalars and "loss_qvalue/adversary" not in scalars
    for k, v in first["agents"].items():
        if k.startswith("adversary.") and v.is_floating_point():
            assert torch.equal(v, second["agents"][k]), k
    moved = [k for k in first["agents"] if k.startswith("agent.actor.") and not torch.equal(
        first["agents"][k], second["agents"][k])]
    assert moved
    # Adam holds moments for the trained group's parameters only
    names = [g["name"] for g in second["optimizer"]["param_groups"]]
    assert names == ["adversary/actor", "adversary/alpha", "adversary/critic", "agent/actor", "agent/alpha",
                     "agent/critic"]
    held = {i for g in second["optimizer"]["param_groups"] if g["name"].startswith("adversary/") for i in g["params"]}
    assert second["optimizer"]["state"] and not held & set(second["optimizer"]["state"])
    inputs = {g: first["agents"][f"{g}.actor.module.0.module.0.net.params.0.weight"].shape[-1]
              for g in ("adversary", "agent")}
    assert inputs == {"adversary": 16, "agent": 14}  # each group's actor reads its own observation


def agent_of(algo, env_name="pendulum", device="cpu", **algo_values):
    """A fresh agent of ``algo`` (its config's defaults, ``algo_values`` over them) on a small env
    on ``device``: ``(cfg, env, agents)``."""
    from omegaconf import OmegaConf

    from torchrl_warp.recipes.common import make_env
    from torchrl_warp.recipes.config import DISCRETE_ALGOS, train_schema
    from torchrl_warp.recipes.train import family

    cfg = train_schema(algo)
    cfg.algo.hidden = [8]
    for k, v in algo_values.items():
        OmegaConf.update(cfg, f"algo.{k}", v)
    params = {"mpe": {"max_steps": 25, "terminated_truncated": True,  # env/mpe.yaml's (kernels compiled once)
                      "continuous_actions": algo not in DISCRETE_ALGOS}}.get(env_name, {})
    cfg = OmegaConf.merge(cfg, {"env": {"name": env_name, "scenario": "simple_spread" if env_name == "mpe" else "",
                                        "params": params}})
    env = make_env(cfg, torch.device(device), 4, seed=0)
    groups = list(env.layout.groups) if env.layout.groups else [None]
    return cfg, env, family(algo).build_agents(cfg, env, groups, torch.device(device))


def perturb_online(loss):
    with torch.no_grad():
        for name, p in loss.named_parameters():
            p.add_(torch.randn_like(p))


def targets_and_sources(loss) -> list:
    """(target, online) parameter pairs of ``loss``'s target networks."""
    pairs = []
    for name in ("actor_network", "value_network", "qvalue_network", "local_value_network", "mixer_network"):
        target = getattr(loss, f"target_{name}_params", None)
        if target is None or name == "actor_network" and not loss.delay_actor:  # without a target: detached params
            continue
        online = getattr(loss, f"{name}_params")
        pairs += [(target.get(k), online.get(k)) for k in target.keys(True, True)
                  if online.get(k).requires_grad]  # parameters (a TanhModule's bounds are buffers)
    return pairs


@pytest.mark.parametrize("algo", ["ddpg", "sac"])
def test_the_targets_move_as_soft_update_says(algo):
    """After each gradient step: target <- (1 - tau) target + tau online, for every target
    network the loss has (DDPG: the actor's and the critic's; SAC: its two critics')."""
    from torchrl.objectives import SoftUpdate

    _, _, agents = agent_of(algo, tau=0.25)
    agent = agents["agent"]
    assert isinstance(agent.updater, SoftUpdate)
    pairs = targets_and_sources(agent.loss)
    assert len(pairs) >= 4 and all(torch.equal(t, s) for t, s in pairs)  # the targets start as copies
    perturb_online(agent.loss)
    before = [t.clone() for t, _ in pairs]
    agent.updater.step()
    for (target, online), old in zip(pairs, before):
        torch.testing.assert_close(target, 0.75 * old + 0.25 * online)
        assert not torch.equal(target, online)


def test_the_targets_are_copied_every_hard_update_interval_steps():
    from torchrl.objectives import HardUpdate

    _, _, agents = agent_of("maddpg", "mpe", hard_update_interval=3)
    agent = agents["agents"]
    assert isinstance(agent.updater, HardUpdate)
    pairs = targets_and_sources(agent.loss)
    copied_at = []
    for step in range(1, 7):
        perturb_online(agent.loss)
        before = [t.clone() for t, _ in pairs]
        agent.updater.step()
        if all(torch.equal(t, s) for t, s in pairs):
            copied_at.append(step)
        else:
            assert all(torch.equal(t, b) for (t, _), b in zip(pairs, before)), step  # untouched in between
    assert copied_at == [3, 6]


def test_a_resumed_run_copies_its_targets_on_the_runs_schedule_not_its_own(tmp_path):
    """HardUpdate every 16 gradient steps; the first run takes 8, the resumed one 8 more: the
    copy comes at its last step (16 of the run), not 16 steps after the resume."""
    first = run(tmp_path / "a", "algo=maddpg", *TINY_MPE, "algo.hard_update_interval=16")
    assert first["gradient_steps"] == 8
    ckpt = tmp_path / "a" / "checkpoint.pt"
    run(tmp_path / "b", "algo=maddpg", *TINY_MPE, "algo.hard_update_interval=16", "env.total_frames=160",
        f"resume={ckpt}")

    def targets_are_online(path) -> bool:
        agents = torch.load(path, weights_only=True)["agents"]
        targets = [k for k in agents if ".target_" in k]
        assert targets
        return all(torch.equal(agents[k], agents[k.replace("target_", "")]) for k in targets)

    assert not targets_are_online(ckpt) and targets_are_online(tmp_path / "b" / "checkpoint.pt")


def test_without_checkpoint_buffer_a_resumed_run_starts_an_empty_buffer(tmp_path):
    run(tmp_path / "a", "algo=maddpg", *TINY_MPE, "algo.checkpoint_buffer=false")
    ckpt = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    assert "replay_buffer" not in ckpt["family"] and ckpt["family"]["gradient_steps"] == 8
    run(tmp_path / "b", "algo=maddpg", *TINY_MPE, "env.total_frames=160", f"resume={tmp_path / 'a' / 'checkpoint.pt'}")
    assert scalars_of(tmp_path / "b")["buffer_frames"] == [40, 80]


def test_a_saved_buffer_refills_a_smaller_or_larger_one_newest_frames_kept():
    from tensordict import TensorDict

    from torchrl_warp.recipes.replay import refill, replay_buffer

    saved = replay_buffer(5, 2, "cpu")
    for start in (0, 3, 6):  # 9 frames into 5: 4..8 kept, the write cursor mid-storage
        saved.extend(TensorDict({"x": torch.arange(start, start + 3.0), ("agents", "done"): torch.ones(3, 2, 1,
                                 dtype=torch.bool)}, [3]))
    state = saved.state_dict()
    for size, expected in ((3, [6.0, 7.0, 8.0]), (5, [4.0, 5.0, 6.0, 7.0, 8.0]), (8, [4.0, 5.0, 6.0, 7.0, 8.0])):
        fresh = replay_buffer(size, 2, "cpu")
        assert refill(fresh, state, "cpu") == len(expected)
        assert fresh[:len(expected)]["x"].tolist() == expected, size
        assert fresh[:len(expected)]["agents", "done"].shape == (len(expected), 2, 1)
    assert refill(replay_buffer(4, 2, "cpu"), replay_buffer(4, 2, "cpu").state_dict(), "cpu") == 0


def test_the_replay_buffer_returns_what_was_written_on_the_envs_device():
    from torchrl_warp.recipes.replay import replay_buffer

    _, env, agents = agent_of("maddpg", "mpe")
    from torchrl_warp.recipes.replay import collection_policy

    with torch.no_grad():
        first, second = (env.rollout(10, collection_policy({"agents": agents["agents"]}),
                                     break_when_any_done=False).reshape(-1) for _ in range(2))
    buffer = replay_buffer(size=50, minibatch_size=7, device=env.device)
    buffer.extend(first)
    stored = buffer[:40]
    assert stored.device == env.device and set(stored.keys(True, True)) == set(first.keys(True, True))
    assert (stored == first).all()
    buffer.extend(second)  # 40 more into 50 slots: the oldest 30 are overwritten
    assert len(buffer) == 50
    assert (buffer[40:50] == second[:10]).all() and (buffer[0:30] == second[10:]).all()
    assert (buffer[30:40] == first[30:40]).all()
    sample = buffer.sample()
    assert sample.batch_size == (7,) and sample.device == env.device
    rows = torch.cat([first["agents", "observation"][30:40], second["agents", "observation"]])
    for row in sample["agents", "observation"]:
        assert (rows == row).all(-1).all(-1).any()  # each sampled frame is one that was written


#: each replay algorithm on its smallest env
ENV_OF = {"ddpg": "pendulum", "sac": "pendulum", "maddpg": "mpe", "masac": "mpe", "iddpg": "mpe", "isac": "mpe",
          "dqn": "cartpole", "iql": "mpe", "vdn": "mpe", "qmix": "mpe"}


def collected(algo, device="cpu", **algo_values):
    """``(cfg, env, agents, agents by group, collecting policy, buffer, batch)`` of ``algo`` on
    ``device``: the buffer holds a 10-step rollout of the policy, prepared as the recipe stores it
    (shared with tests/test_value_decomposition.py and tests/test_gpu_replay.py)."""
    from torchrl_warp.recipes.common import with_group_done_flags
    from torchrl_warp.recipes.replay import collection_policy, replay_buffer

    cfg, env, agents = agent_of(algo, ENV_OF[algo], device=device, **algo_values)
    groups = list(env.layout.groups) if env.layout.groups else [None]
    by_group = {g: agents[g or "agent"] for g in groups}
    policy = collection_policy(by_group)
    with torch.no_grad():
        batch = with_group_done_flags(env.rollout(10, policy, break_when_any_done=False), groups)
    for agent in by_group.values():
        agent.prepare(batch)
    buffer = replay_buffer(100, 16, env.device)
    buffer.extend(batch.reshape(-1))
    return cfg, env, agents, by_group, policy, buffer, batch


def sync_free_steps(algo, device="cpu", amp=False) -> set:
    """Two rounds of what a run repeats (extend and sample the buffer, a gradient step, the
    targets' update and the exploration's schedule, the collecting policy on an env step) under
    ``forbid_host_syncs(device)`` (on CUDA also torch's sync debug mode, raising); returns the
    dtypes the gradient steps' matrix products ran in."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from torchrl_warp.host_syncs import forbid_host_syncs
    from torchrl_warp.recipes.replay import GradientStep, make_optimizer

    cfg, env, agents, by_group, policy, buffer, batch = collected(algo, device)
    kind = torch.device(device).type
    step = GradientStep(by_group, make_optimizer(cfg, agents, env.device), cfg.algo,
                        torch.autocast(kind, dtype=torch.bfloat16, enabled=amp), False, env.device)
    step(buffer.sample())  # Adam's state made (its first step allocates)
    dtypes = set()

    class MatmulDtypes(TorchDispatchMode):  # the dtypes the step's matrix products ran in
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket in (torch.ops.aten.addmm, torch.ops.aten.mm, torch.ops.aten.bmm):
                dtypes.add(out.dtype)
            return out

    td = env.reset()
    previous = torch.cuda.get_sync_debug_mode() if kind == "cuda" else None
    if kind == "cuda":
        torch.cuda.set_sync_debug_mode("error")
    try:
        with forbid_host_syncs(device):
            for _ in range(2):
                buffer.extend(batch.reshape(-1))
                with MatmulDtypes():
                    losses = step(buffer.sample())
                for agent in by_group.values():
                    agent.updater.step()
                    agent.explore_at(10, 100)
                with torch.no_grad():
                    policy(td.clone())
    finally:
        if kind == "cuda":
            torch.cuda.set_sync_debug_mode(previous)
    assert all(torch.isfinite(v).item() for v in losses.values())
    return dtypes


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
@pytest.mark.parametrize("algo", ["ddpg", "sac", "maddpg", "masac"])
def test_a_gradient_step_and_a_sample_ask_nothing_of_the_host(algo, amp):
    """What a GPU run repeats every gradient step (the buffer's sample, the losses, backward,
    clipping, Adam, the targets' update) and every env step (the collecting policy) has no host
    sync and copies nothing from the host (``forbid_host_syncs``, standing in for a CUDA graph's
    capture): on a GPU they queue without waiting. With ``algo.amp`` the losses' layers run in
    bfloat16 (the recipe's autocast) and the step stays sync-free."""
    assert sync_free_steps(algo, amp=amp) == ({torch.bfloat16} if amp else {torch.float32})


def test_torchrls_gaussian_noise_would_ask_the_host_and_ours_does_not():
    """Why recipes/off_policy.py clamps the noisy action itself: ``AdditiveGaussianModule``
    first asks whether the action is out of the spec's bounds (a host sync per env step)."""
    from tensordict import TensorDict
    from torchrl.data import Bounded
    from torchrl.modules import AdditiveGaussianModule

    from torchrl_warp.host_syncs import HostSyncError, forbid_host_syncs
    from torchrl_warp.recipes.off_policy import AdditiveGaussianNoSync

    spec = Bounded(-1.0, 1.0, shape=(5, 2))
    td = TensorDict({"action": torch.zeros(5, 2)}, [5])
    with pytest.raises(HostSyncError, match="Tensor.__bool__"):
        with forbid_host_syncs("cpu"):
            AdditiveGaussianModule(spec, sigma_init=3.0)(td.clone())
    torch.manual_seed(0)
    with forbid_host_syncs("cpu"):
        ours = AdditiveGaussianNoSync(spec, sigma_init=3.0)(td.clone())["action"]
    torch.manual_seed(0)
    theirs = AdditiveGaussianModule(spec, sigma_init=3.0)(td.clone())["action"]
    assert torch.equal(ours, theirs) and ours.abs().max() == 1.0  # the same draws, clamped into the bounds


@pytest.mark.parametrize("algo", ["maddpg", "masac"])
def test_the_policies_fit_the_action_spec(algo):
    """The actors' actions lie within the spec's bounds; under ``DETERMINISTIC`` (evaluation,
    recipes/play.py) they are the same every call; the explorer's differ from them."""
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import TanhNormal

    _, env, agents = agent_of(algo, "mpe")
    agent, spec = agents["agents"], env.full_action_spec["agents", "action"]
    td = env.reset()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        a, b = (agent.actor(td.clone())["agents", "action"] for _ in range(2))
    assert torch.equal(a, b) and spec.is_in(a) and a.shape == (4, 3, 2)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        explored = agent.explorer(td.clone())["agents", "action"]
    assert spec.is_in(explored) and not torch.equal(explored, a)
    if algo == "masac":
        dist = agent.actor.get_dist(td.clone())
        assert isinstance(dist, TanhNormal)
        assert torch.equal(dist.low, spec.space.low[0]) and torch.equal(dist.high, spec.space.high[0])


BAD = [
    # (overrides, the message's start): refused before any env is built
    (("algo=ddpg",), "algo=ddpg acts in continuous action spaces; env=cartpole's actions are discrete: use "
                     "env=pendulum or env=mountain_car_continuous, or algo=dqn"),
    (("algo=maddpg", "env=mpe", "env.params.continuous_actions=false"),
     "algo=maddpg acts in continuous action spaces; env=mpe's actions are discrete: set "
     "env.params.continuous_actions=true, or algo=iql, vdn or qmix"),
    (("algo=masac", "env=tag"), "algo=masac acts in continuous action spaces; env=tag's actions are multi-discrete"),
    (("algo=sac", "env=pendulum", "algo.buffer_size=100", "algo.minibatch_size=256"),
     "algo.buffer_size=100 is smaller than a collected batch (env.num_envs=4 x env.steps_per_batch="),
    (("algo=ddpg", "env=pendulum", "algo.sigma_init=0.1", "algo.sigma_end=0.5"),
     "algo.sigma_end=0.5 is above algo.sigma_init=0.1"),
    (("algo=sac", "env=mpe"), "algo=sac does not fit env=mpe: use ppo, ddpg, sac, dqn for single-agent envs"),
    (("algo=masac", "env=pendulum"), "algo=masac does not fit env=pendulum"),
    (("algo=masac", "env=mpe", "algo.tau=0"), "algo.tau must be in (0, 1], got 0.0"),
    (("algo=masac", "env=mpe", "algo.frames_per_gradient_step=0"), "algo.frames_per_gradient_step must be in [1, inf)"),
    (("algo=masac", "env=mpe", "algo.sigma_anneal_frames=0"), "algo.sigma_anneal_frames must be null (half of "
                                                              "env.total_frames) or an int >= 1, got 0"),
    (("algo=masac", "env=mpe", "algo.train_groups=[]"), "algo.train_groups must be null (every group) or a non-empty"),
    (("algo=masac", "env=mpe", "algo.name=ppo"), "algo.name must be one of ddpg, sac, iddpg, maddpg, isac, masac, "
                                                 "got 'ppo' (algo=ppo picks ppo's config)"),
]


def refused_before_any_work(run_dir, overrides, message) -> None:
    """``train`` on ``overrides`` raises a ConfigError holding ``message`` and writes nothing
    into ``run_dir`` (shared with tests/test_value_decomposition.py; with the ``no_work``
    fixture no env may be built either)."""
    from torchrl_warp.recipes.config import ConfigError
    from torchrl_warp.recipes.train import train

    with pytest.raises(ConfigError) as raised:
        train(compose("env.num_envs=4", "env.total_frames=64", *overrides), str(run_dir))
    assert message in str(raised.value)
    assert os.listdir(run_dir) == []


@pytest.mark.parametrize("overrides, message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_a_bad_config_is_refused_before_any_work(tmp_path, no_work, overrides, message):  # noqa: F811
    refused_before_any_work(tmp_path, overrides, message)


@pytest.mark.parametrize("argv, message", [
    (["algo=masac", "env=mpe", "algo.clip_epsilon=0.1"],
     "algo.clip_epsilon is not a config key of algo=ddpg, sac, iddpg, maddpg, isac, masac (algo.clip_epsilon is one "
     "of algo=ppo, mappo, ippo)"),
    (["algo.tau=0.01", "algo=ppo"], "algo.tau is not a config key of algo=ppo, mappo, ippo (algo.tau is one of "
                                    "algo=ddpg, sac, iddpg, maddpg, isac, masac, dqn, iql, vdn, qmix)"),
    (["algo=sac", "env=pendulum", "+algo.learning_rate=1e-3"],
     "algo.learning_rate is not a config key: did you mean algo.lr?"),
    (["algo=sac", "env=pendulum", "algo.mixing_embed_dim=8"],
     "algo.mixing_embed_dim is not a config key of algo=ddpg, sac, iddpg, maddpg, isac, masac (algo.mixing_embed_dim "
     "is one of algo=dqn, iql, vdn, qmix)"),
])
def test_a_key_of_another_family_is_refused_naming_who_takes_it(argv, message):
    from torchrl_warp.recipes.config import ConfigError, command_line_config

    with pytest.raises(ConfigError) as raised:
        command_line_config(argv)
    assert raised.value.problems == [message]


def test_on_the_command_line_the_refusals_come_before_torch(tmp_path):
    proc, seconds, errors, imported = run_cli(tmp_path, "algo=pong", "algo.tau=0.1")
    assert proc.returncode == 2, errors
    assert errors == ("error: In 'config': Could not find 'algo/pong'; Available options in 'algo': ddpg, dqn, iddpg, "
                      "ippo, iql, isac, maddpg, mappo, masac, ppo, qmix, sac, vdn")  # the algos, no schema
    proc, seconds, errors, imported = run_cli(tmp_path, "algo=maddpg", "env=mpe", "env.params.continuous_actions=false")
    assert proc.returncode == 2 and errors.startswith("error: algo=maddpg acts in continuous action spaces"), errors
    assert "torch" not in imported and not (tmp_path / "run").exists()


def test_an_unknown_train_group_is_refused_naming_the_envs_groups(tmp_path):
    from torchrl_warp.recipes.config import ConfigError

    with pytest.raises(ConfigError, match=r"algo.train_groups names 'runners', not a group of this env \(its "
                                          r"groups: agents\)"):
        run(tmp_path, "algo=maddpg", *TINY_MPE, "algo.train_groups=[runners]")


def test_every_off_policy_setting_has_a_doc_and_what_it_takes():
    from dataclasses import fields

    from torchrl_warp.recipes.config import OffPolicyConfig, ReplayConfig, settings_table

    for schema in (ReplayConfig, OffPolicyConfig):
        for f in fields(schema):
            m = f.metadata
            default = f.default_factory() if callable(f.default_factory) else f.default
            assert m.get("doc"), f.name
            assert isinstance(default, bool) or f.name == "matmul_precision" or m["range"] or m["choices"] or \
                m["check"], f"{f.name} has no declared range"
    table = settings_table()
    assert "| algo.frames_per_gradient_step | 256 | [1, inf) | algo=ddpg, sac, iddpg, maddpg, isac, masac, dqn, iql, " \
           "vdn, qmix: frames collected per gradient step" in table
    assert "| algo.sigma_anneal_frames | null | null, or an int >= 1 | algo=ddpg, sac, iddpg, maddpg, isac, masac:" \
           in table


@pytest.mark.parametrize("algo, extra, gap", [("maddpg", ("algo.sigma_anneal_frames=4000",), 0.5),
                                              ("masac", ("algo.alpha_init=0.1",), 0.3)])
def test_maddpg_and_masac_learn_simple_spread_with_one_agent(tmp_path, algo, extra, gap):
    """8000 frames (64 envs x 25 steps x 5 batches), 500 gradient steps: ~5-10 s on one CPU core.
    This machine, seeds 0-2: MADDPG closes 0.90 / 0.96 / 0.96 of the random -> scripted gap
    (deterministic evaluation), MASAC (alpha_init 0.1) 0.52 / 0.54; an untrained policy closes
    -0.07 to 0.12 of it (tests/test_recipe_mpe.py). With alpha_init 1 MASAC needs ~16k frames.
    MADDPG's noise falls over the first half (tuning/mpe_maddpg.yaml's schedule is a GPU run's)."""
    summary = run(tmp_path, f"algo={algo}", "env=mpe", "device=cpu", "+env.params.n_agents=1", "env.num_envs=64",
                  "env.steps_per_batch=25", "env.total_frames=8000", "algo.hidden=[64,64]", "algo.lr=3e-3",
                  "algo.minibatch_size=256", "algo.frames_per_gradient_step=16", "algo.gamma=0.9", "eval_envs=256",
                  "algo.tau=0.005", "algo.init_random_frames=0", "checkpoint_every=100", "logger=none", *extra)
    assert summary["frames"] == 8000 and summary["gradient_steps"] == 500
    assert summary["eval_gap_closed_deterministic/agents"] > gap, summary


TUNING_DIR = os.path.join(os.path.dirname(__file__), "..", "recipes", "conf", "tuning")


def _env_and_algo(tuning: str) -> tuple:
    """``mountain_car_continuous_sac`` -> (``mountain_car_continuous``, ``sac``): the longest env name first."""
    from torchrl_warp.recipes.config import ENV_NAMES

    env = max((e for e in ENV_NAMES if tuning.startswith(e + "_")), key=len)
    return env, tuning[len(env) + 1:]


@pytest.mark.parametrize("tuning", sorted(f[:-5] for f in os.listdir(TUNING_DIR) if f.endswith(".yaml")))
def test_each_tuning_applies_to_its_pair_and_trains_whole_batches(tuning):
    """recipes/conf/tuning/<env>_<algo>.yaml (Hydra's specialization: ``optional tuning:
    ${env}_${algo}``) is composed for that env and algo, gives a config the checks pass, and
    trains whole batches; another algo on the env does not get it."""
    from torchrl_warp.recipes.config import ALGO_NAMES, check_config

    env, algo = _env_and_algo(tuning)
    assert algo in ALGO_NAMES, tuning
    cfg = compose(f"env={env}", f"algo={algo}")
    check_config(cfg)
    assert cfg.env.total_frames % (cfg.env.num_envs * cfg.env.steps_per_batch) == 0
    untuned = compose(f"env={env}", f"algo={algo}", "~tuning")  # the defaults list without the specialization
    assert cfg != untuned, f"tuning/{tuning}.yaml changes nothing"
    other = "mappo" if algo != "mappo" else "ippo"
    assert compose(f"env={env}", f"algo={other}", "~tuning") == compose(f"env={env}", f"algo={other}") or \
        os.path.exists(os.path.join(TUNING_DIR, f"{env}_{other}.yaml"))  # another algo gets no other's tuning


def test_qmix_on_mpe_picks_discrete_actions_and_mappo_keeps_its_settings():
    assert compose("env=mpe", "algo=qmix").env.params.continuous_actions is False  # tuning/mpe_iql.yaml
    assert compose("env=mpe", "algo=masac").env.params.continuous_actions is True
    mappo = compose("env=mpe", "algo=mappo").algo  # tuning/mpe_mappo.yaml, as env/mpe.yaml's algo section was
    assert (mappo.gamma, mappo.reward_scale, mappo.lr, list(mappo.hidden), mappo.minibatch_size) == \
        (0.9, 0.1, 1e-3, [64, 64], 12800)
    assert compose("env=mpe", "algo=maddpg").algo.gamma == 0.9 and compose("env=mpe", "algo=maddpg").algo.lr == 1e-3


@pytest.mark.parametrize("interval", [0, 2], ids=["soft", "hard"])
def test_soft_target_updates_are_part_of_the_gradient_step_and_hard_ones_follow_it(interval):
    """recipes/replay.py's target_updates: SoftUpdate runs inside GradientStep (so a captured
    step holds it), HardUpdate after it (its counter is a Python branch)."""
    from torchrl_warp.recipes.replay import GradientStep, make_optimizer, target_updates

    cfg, env, agents, by_group, policy, buffer, batch = collected("maddpg", hard_update_interval=interval)
    within, after = target_updates(by_group)
    step = GradientStep(by_group, make_optimizer(cfg, agents, env.device), cfg.algo,
                        torch.autocast("cpu", enabled=False), False, env.device, then=within)
    pairs = targets_and_sources(by_group["agents"].loss)
    before = [t.clone() for t, _ in pairs]
    step(buffer.sample())
    moved = [not torch.equal(t, b) for (t, _), b in zip(pairs, before)]
    assert all(moved) if interval == 0 else not any(moved)  # soft: within the step; hard: not yet
    after()
    after_step = [t.clone() for t, _ in pairs]
    step(buffer.sample())
    after()  # the second hard step copies
    if interval:
        assert all(torch.equal(t, s) for t, s in pairs)
    else:
        assert all(not torch.equal(t, a) for (t, _), a in zip(pairs, after_step))
