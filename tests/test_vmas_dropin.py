"""MPEEnv as a drop-in for TorchRL's VmasEnv, beyond specs and keys: what TorchRL's multi-agent
examples (sota-implementations/multiagent) and BenchMARL's VMAS task read off the env
(``env.world.dt``, ``env.world.agents``, ``env.scenario``, ``env.max_steps``, ``het_specs``,
the unbatched specs...), each compared with ``VmasEnv``'s value for the same scenario and
arguments. Nothing here steps a kernel but the examples' evaluation path at the end."""
import warnings

import numpy as np
import pytest
import torch

from torchrl_warp.envs import MPEEnv, SimpleTagEnv
from torchrl_warp.envs.mpe import SCENARIO_NAMES

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")
from torchrl.envs.libs.vmas import VmasEnv  # noqa: E402

#: scenarios whose entities VMAS recolours from the goal it draws (ours: per env, in render)
RECOLOURED = {"simple_adversary", "simple_push", "simple_reference", "simple_speaker_listener"}
#: VMAS keeps these World properties private (``world._substeps``...)
PRIVATE_PHYSICS = ("substeps", "sub_dt", "drag", "collision_force", "contact_margin")


def pair(scenario, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MPEEnv(scenario, num_envs=3, **kwargs), VmasEnv(scenario, num_envs=3, **kwargs)


def names(entities):
    return [e.name for e in entities]


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_world_is_vmas_world(scenario):
    ours, theirs = pair(scenario)
    w, v = ours.world, theirs.world
    for attr in ("dt", "dim_p", "dim_c", "x_semidim", "y_semidim", "batch_dim"):
        assert getattr(w, attr) == getattr(v, attr), attr
    for attr in PRIVATE_PHYSICS:
        assert getattr(w, attr) == pytest.approx(getattr(v, f"_{attr}"), rel=1e-12), attr
    assert torch.device(w.device) == torch.device(v.device)
    for attr in ("agents", "policy_agents", "landmarks", "entities", "scripted_agents"):
        assert names(getattr(w, attr)) == names(getattr(v, attr)), attr
    assert list(w.joints) == list(v.joints) == []
    for mine, vmas_entity in zip(w.entities, v.entities):
        for attr in ("mass", "movable", "collide", "max_speed"):
            assert getattr(mine, attr) == getattr(vmas_entity, attr), (mine.name, attr)
        assert mine.shape.radius == pytest.approx(vmas_entity.shape.radius, rel=1e-12), mine.name
        if scenario not in RECOLOURED:
            assert mine.color == pytest.approx(tuple(torch.as_tensor(vmas_entity.color).tolist()), abs=1e-6)
    for mine, vmas_agent in zip(w.agents, v.agents):
        for attr in ("u_range", "u_multiplier", "silent"):
            assert getattr(mine, attr) == getattr(vmas_agent, attr), (mine.name, attr)
        for attr in ("pos", "vel", "c"):
            a, b = getattr(mine.state, attr), getattr(vmas_agent.state, attr)
            assert (a is None) == (b is None) and (a is None or a.shape == b.shape), (mine.name, attr)


def test_entity_states_are_views_of_the_env_state():
    env = MPEEnv("simple_speaker_listener", num_envs=2, seed=0)
    speaker, listener = env.world.agents
    assert torch.equal(listener.state.pos, env.state["pos"][:, 1])
    assert (listener.state.pos != 0).any()  # reset when built, as VMAS's
    landmark = env.world.landmarks[2]
    assert torch.equal(landmark.state.pos, env.state["pos"][:, 2 + 2])
    assert torch.equal(speaker.state.c, env.state["comm"][:, 0]) and listener.state.c is None  # the listener is silent
    env.step(env.rand_action(env.reset()))
    assert torch.equal(listener.state.vel, env.state["vel"][:, 1])  # always the state now


def test_world_and_scenario_are_read_only():
    env = MPEEnv("simple_tag", num_envs=2)
    for obj, attr in ((env.world, "dt"), (env.world, "agents"), (env.world.agents[0], "mass"),
                      (env.world.agents[0].state, "pos"), (env.scenario, "bound")):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(obj, attr, 1.0)
    with pytest.raises(AttributeError, match="scenario 'simple_tag' has no attribute 'n_agents'"):
        env.scenario.n_agents


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_scenario_and_the_env_attributes_vmasenv_has(scenario):
    ours, theirs = pair(scenario, max_steps=7)
    assert str(ours.scenario) == ours.scenario.name == ours.scenario_name == theirs.scenario_name == scenario
    assert type(ours).scenario == scenario  # the name on the class
    assert ours.scenario.world is ours.world
    assert [ours.scenario.info(a) for a in ours.world.agents] == [theirs.scenario.info(a) for a in theirs.world.agents]
    for attr in ("max_steps", "continuous_actions", "categorical_actions", "multidiscrete_actions",
                 "terminated_truncated", "clamp_action", "dict_spaces", "grad_enabled", "from_pixels", "pixels_only",
                 "het_specs", "het_specs_map", "agent_names_to_indices_map", "n_agents", "num_envs", "agent_names",
                 "group_map"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert names(ours.agents) == names(theirs.agents)  # BenchMARL's group_map fallback reads these
    for attr in ("full_action_spec_unbatched", "full_observation_spec_unbatched", "full_reward_spec_unbatched",
                 "full_done_spec_unbatched", "observation_spec_unbatched", "action_spec_unbatched"):
        a, b = getattr(ours, attr), getattr(theirs, attr)
        assert sorted(a.keys(True, True)) == sorted(b.keys(True, True)), attr
        assert all(a[k].shape == b[k].shape and a[k].dtype == b[k].dtype for k in a.keys(True, True)), attr


def test_the_attributes_follow_the_arguments():
    ours, theirs = pair("simple_tag", continuous_actions=False, categorical_actions=False, max_steps=None,
                        num_good_agents=2, bound=1.5)
    assert (ours.max_steps, ours.continuous_actions, ours.categorical_actions) == \
        (theirs.max_steps, theirs.continuous_actions, theirs.categorical_actions) == (None, False, False)
    assert ours.scenario.bound == theirs.scenario.bound == 1.5
    assert ours.world.x_semidim == theirs.world.x_semidim == 1.5
    assert SimpleTagEnv(num_envs=1, max_steps=4).max_steps == 4


def test_the_mappo_example_evaluation_runs_as_written():
    """TorchRL's sota-implementations/multiagent/mappo_ippo.py evaluation and
    utils/logging.py's log_evaluation: frames from a rendering callback, a video at
    ``fps=1 / env_test.world.dt`` (its default wandb path)."""
    def rendering_callback(env, td):
        env.frames.append(env.render(mode="rgb_array", agent_index_focus=None))

    env_test = MPEEnv("simple_spread", num_envs=2, continuous_actions=True, max_steps=4, seed=0)
    env_test.frames = []
    rollouts = env_test.rollout(max_steps=4, callback=rendering_callback, auto_cast_to_device=True,
                                break_when_any_done=False)
    vid = torch.tensor(np.transpose(env_test.frames[: rollouts.unbind(0)[0].batch_size[0]], (0, 3, 1, 2)),
                       dtype=torch.uint8).unsqueeze(0)
    assert len(env_test.frames) >= 3 and vid.shape == (1, len(env_test.frames), 3, 400, 400)  # TorchRL's count
    _, theirs = pair("simple_spread")
    assert 1 / env_test.world.dt == 1 / theirs.world.dt == 10.0
    if not env_test.is_closed:  # the example's clean-up
        env_test.close()
