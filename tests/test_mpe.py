"""MPEEnv as a drop-in for TorchRL's VmasEnv: for the same arguments, the same groups, keys,
specs and attributes; what cannot apply is refused with a clear error. (Each scenario's
transitions are checked against VMAS in its own tests/test_<scenario>.py.)"""
import warnings

import numpy as np
import pytest
import torch
from torchrl.envs.utils import MarlGroupMapType, check_env_specs

from torchrl_warp.envs import MPEEnv
from torchrl_warp.envs.mpe import SCENARIO_NAMES, default_group_map

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")
from torchrl.envs.libs.vmas import VmasEnv  # noqa: E402

ACTION_KINDS = {  # VmasEnv arguments -> what they select
    "continuous": dict(continuous_actions=True),
    "categorical": dict(continuous_actions=False),
    "one_hot": dict(continuous_actions=False, categorical_actions=False),
    "multidiscrete": dict(continuous_actions=False, multidiscrete_actions=True),
    "multi_one_hot": dict(continuous_actions=False, categorical_actions=False, multidiscrete_actions=True),
}


def vmas_env(scenario, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return VmasEnv(scenario, num_envs=3, max_steps=10, **kwargs)


def describe(spec):
    """Every leaf of a composite spec: key -> (class, shape, dtype, bounds or n)."""
    out = {}
    for key, leaf in spec.items(True, True):
        space = leaf.space
        if hasattr(space, "low"):
            extra = (space.low.flatten().tolist(), space.high.flatten().tolist())
        elif hasattr(leaf, "nvec"):
            extra = torch.as_tensor(leaf.nvec).flatten().tolist()
        else:
            extra = getattr(space, "n", None)
        # our BatchedMultiCategorical is a MultiCategorical that samples faster
        out[key] = (type(leaf).__name__.replace("Batched", ""), tuple(leaf.shape), leaf.dtype, extra)
    return out


@pytest.mark.parametrize("kind", ACTION_KINDS)
@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_same_groups_keys_and_specs_as_vmasenv(scenario, kind):
    theirs = vmas_env(scenario, **ACTION_KINDS[kind])
    ours = MPEEnv(scenario, num_envs=3, max_steps=10, **ACTION_KINDS[kind])
    assert ours.group_map == theirs.group_map
    assert list(ours.group_map) == list(theirs.group_map)  # group order too
    assert ours.n_agents == theirs.n_agents and ours.agent_names == theirs.agent_names
    assert ours.done_keys == theirs.done_keys
    assert sorted(ours.reward_keys) == sorted(theirs.reward_keys)
    assert sorted(ours.action_keys) == sorted(theirs.action_keys)
    for name in ("full_action_spec", "full_observation_spec", "full_reward_spec", "full_done_spec"):
        assert describe(getattr(ours, name)) == describe(getattr(theirs, name)), name


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_rollouts_are_plain_tensordicts_with_vmasenv_keys(scenario):
    ours = MPEEnv(scenario, num_envs=2, max_steps=4, seed=0)
    check_env_specs(ours)
    td = ours.rollout(5, break_when_any_done=False)
    theirs = vmas_env(scenario).rollout(5, break_when_any_done=False)
    assert set(td.keys(True, True)) == set(theirs.keys(True, True))
    assert type(td).__name__ == "TensorDict"
    assert td["next", "done"][:, 3].all() and td["next", "terminated"][:, 3].all()  # max_steps = 4


def test_terminated_truncated_adds_truncated_which_the_time_limit_sets():
    env = MPEEnv("simple_spread", num_envs=2, max_steps=3, terminated_truncated=True)
    assert env.done_keys == ["done", "terminated", "truncated"]
    td = env.rollout(3, break_when_any_done=False)
    assert td["next", "truncated"][:, 2].all() and not td["next", "terminated"].any()


def test_no_max_steps_means_no_time_limit():
    env = MPEEnv("simple_spread", num_envs=2)  # VmasEnv's default: max_steps=None
    assert not env.rollout(40, break_when_any_done=False)["next", "done"].any()


def test_group_maps():
    names = [f"agent_{i}" for i in range(3)]
    env = MPEEnv("simple_spread", num_envs=2, group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)
    assert env.group_map == {n: [n] for n in names}
    assert env.rollout(2)["next", "agent_1", "observation"].shape == (2, 2, 1, 14)
    env = MPEEnv("simple_spread", num_envs=2, group_map={"pair": names[:2], "solo": names[2:]})
    assert env.full_action_spec["pair", "action"].shape == (2, 2, 2)
    with pytest.raises(ValueError, match="in the scenario's order"):
        MPEEnv("simple_spread", num_envs=2, group_map={"a": [names[1]], "b": [names[0], names[2]]})
    with pytest.raises(ValueError, match="invalid group_map"):
        MPEEnv("simple_spread", num_envs=2, group_map={"a": names[:2]})  # agent_2 in no group
    # simple_tag's adversaries and good agents observe different sizes: one group would need lazy stacks
    with pytest.raises(ValueError, match="group 'agents' mixes agents"):
        MPEEnv("simple_tag", num_envs=2, group_map=MarlGroupMapType.ALL_IN_ONE_GROUP)
    assert default_group_map(["alice_0", "bob_0"]) == {"alice": ["alice_0"], "bob": ["bob_0"]}
    assert default_group_map(["a", "b_0"]) == {"agents": ["a", "b_0"]}


def test_arguments_that_cannot_apply_are_refused():
    for key in ("dict_spaces", "grad_enabled", "from_pixels"):
        with pytest.raises(ValueError, match=f"{key}=True is not supported"):
            MPEEnv("simple_spread", num_envs=2, **{key: True})
    with pytest.raises(ValueError, match="unknown scenario 'waterfall'"):
        MPEEnv("waterfall", num_envs=2)
    with pytest.raises(TypeError, match="unknown parameter.*'n_agentz'"):
        MPEEnv("simple_spread", num_envs=2, n_agentz=4)
    with pytest.raises(ValueError, match="max_steps must be a positive int or None"):
        MPEEnv("simple_spread", num_envs=2, max_steps=0)
    with pytest.raises(ValueError, match="clamp_actions applies to continuous actions only"):
        MPEEnv("simple_spread", num_envs=2, continuous_actions=False, clamp_actions=True)


def test_scenario_kwargs_as_vmasenv_takes_them():
    env = MPEEnv("simple_spread", num_envs=2, scenario_kwargs={"n_agents": 5})
    assert env.n_agents == 5
    env = MPEEnv("simple_spread", num_envs=2, scenario_kwargs={"n_agents": 5}, n_agents=4)  # kwargs win
    assert env.n_agents == 4


def test_out_of_range_actions_refused_by_default_and_clamped_with_clamp_actions():
    env = MPEEnv("simple_spread", num_envs=2, seed=1)
    td = env.reset()
    td["agents", "action"] = torch.full((2, 3, 2), 1.5)
    with pytest.raises(ValueError, match="outside its spec"):
        env.step(td)
    clamped = MPEEnv("simple_spread", num_envs=2, seed=1, clamp_actions=True)
    exact = MPEEnv("simple_spread", num_envs=2, seed=1)
    a, b = clamped.reset(), exact.reset()
    a["agents", "action"] = torch.full((2, 3, 2), 1.5)
    b["agents", "action"] = torch.full((2, 3, 2), 1.0)
    assert torch.equal(clamped.step(a)["next", "agents", "observation"], exact.step(b)["next", "agents", "observation"])
    a["agents", "action"] = torch.full((2, 3, 2), float("nan"))
    with pytest.raises(ValueError, match="NaN or infinite"):
        clamped.step(a)


def test_render_draws_env_0_as_rgb():
    env = MPEEnv("simple_spread", num_envs=2, seed=0)
    env.reset()
    frame = env.render(mode="rgb_array")
    assert frame.shape == (400, 400, 3) and frame.dtype == np.uint8
    assert (frame != 255).any() and (frame == 255).any()  # entities on a white background
    blue = np.array([64, 64, 191])
    assert (np.abs(frame.astype(int) - blue).sum(-1) == 0).sum() > 100  # the agents are VMAS's blue
    env.state["pos"][0] = 5.0  # everything out of view but the frame grows to fit
    assert (env.render(mode="rgb_array") != 255).any()
    with pytest.raises(ValueError, match="only mode='rgb_array'"):
        env.render(mode="human")
    with pytest.raises(IndexError):
        env.render(env_index=2)


def test_writing_state_fields_between_steps_sets_the_state_as_documented():
    """docs/environments.md, "Setting a state": a write to pos/vel is what the next step starts from."""
    env = MPEEnv("simple_spread", num_envs=8, seed=0)
    td = env.reset()
    env.state["pos"][:, 0] = torch.tensor([0.5, -0.5])
    env.state["vel"].zero_()
    td["agents", "action"] = torch.zeros(8, 3, 2)
    # the others as they start (where they end, a push may have taken them out of reach)
    far = (env.state["pos"][:, 1:3] - torch.tensor([0.5, -0.5])).norm(dim=-1).min(-1).values > 0.3
    out = env.step(td)["next", "agents", "observation"]
    assert far.any()  # envs where no other agent pushes agent 0: it stays where it was put
    assert torch.allclose(out[far, 0, :2], torch.tensor([0.5, -0.5]))
    assert (out[far, 0, 2:4] == 0).all()


# ----- one default for max_steps, stated once (issue 40, item 6) -------------------------
DOCS = __import__("pathlib").Path(__file__).resolve().parents[1] / "docs" / "environments.md"


def documented_default(table_title: str, name: str) -> str:
    """The default column of parameter ``name`` in the table under ``table_title`` in
    docs/environments.md, as written there (``"0"``)."""
    text = DOCS.read_text()
    table = text[text.index(table_title):].split("\n\n")[1]
    rows = [r for r in table.splitlines() if r.startswith(f"| `{name}` |")]
    assert len(rows) == 1, rows
    return rows[0].split("|")[2].strip().strip("`")


def test_max_steps_has_one_default_which_the_docs_table_states():
    import inspect

    from torchrl_warp.envs.mpe import SCENARIOS

    table = documented_default("Parameters every scenario has:", "max_steps")
    assert table == "0"  # the table's meaning column: "0: no limit (VmasEnv's max_steps=None)"
    assert inspect.signature(MPEEnv).parameters["max_steps"].default is None  # VmasEnv's
    assert inspect.signature(VmasEnv.__init__).parameters["max_steps"].default is None
    for name in SCENARIO_NAMES:
        MPEEnv(name, num_envs=1)  # registers the class in SCENARIOS
        assert SCENARIOS[name].defaults["max_steps"] == int(table), name
    built = [MPEEnv("simple_spread", num_envs=2), SCENARIOS["simple_spread"](num_envs=2)]
    assert [e.params.max_steps for e in built] == [0, 0] and [e.max_steps for e in built] == [None, None]
    for env in built:  # no limit either way
        assert not env.rollout(30, break_when_any_done=False)["next", "done"].any()


# ----- errors that name what the user built (item 7), NumPy ints (item 8) ---------------
@pytest.mark.parametrize("kwargs, match", [
    (dict(num_envs=-1), r"^MPEEnv\('simple_spread'\): num_envs must be a positive int, got -1$"),
    (dict(num_envs=2, n_agents=0), r"^MPEEnv\('simple_spread'\): parameter 'n_agents' must be an int in \[1, "),
    (dict(num_envs=2, max_steps=-3), r"^MPEEnv\('simple_spread'\): max_steps must be a positive int or None, got -3"),
    (dict(num_envs=2, continuous_actions=False, clamp_actions=True),
     r"^MPEEnv\('simple_spread'\): clamp_actions applies to continuous actions only"),
    (dict(num_envs=2, dt=1e39), r"^MPEEnv\('simple_spread'\): parameter 'dt' must be a float that float32 holds"),
])
def test_errors_name_the_mpeenv_the_user_built(kwargs, match):
    with pytest.raises(ValueError, match=match) as refused:
        MPEEnv("simple_spread", **kwargs)
    assert "SimpleSpreadEnv" not in str(refused.value)


def test_numpy_ints_are_taken_where_ints_are():
    env = MPEEnv("simple_spread", num_envs=np.int64(4), max_steps=np.int32(3), n_agents=np.int64(2),
                 seed=np.uint64(5))
    assert env.batch_size == (4,) and env.params.max_steps == 3 and env.n_agents == 2
    assert type(env.num_envs) is int and type(env.params.n_agents) is int
    assert env.rollout(np.int64(3), break_when_any_done=False)["next", "done"][:, 2].all()
    assert env.render(env_index=np.int64(1)).shape == (400, 400, 3)


def test_a_step_before_any_reset_steps_from_where_vmas_starts():
    """VMAS resets its world when it is built, so VmasEnv steps before any reset: so do we,
    and the first reset draws the same start (a fresh env's first reset is unchanged)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = VmasEnv("simple_spread", num_envs=2)
    assert theirs.rand_step()["next", "agents", "observation"].shape == (2, 3, 14)
    env = MPEEnv("simple_spread", num_envs=2, seed=0)
    start = env.state["pos"].clone()
    assert (start != 0).any()
    assert env.rand_step()["next", "agents", "observation"].shape == (2, 3, 14)
    env.reset()
    assert torch.equal(env.state["pos"], start)
