"""Every TorchRL transform a user may compose, on every env of the package.

Every ``Transform`` subclass that ``torchrl.envs.transforms`` exports is in exactly one
of two tables (a test fails when a TorchRL release adds one):

- ``APPLICABLE``: name -> a :class:`Case` that builds the transform for a given env,
  picking its keys from the env's specs (observation, reward, action keys, one per
  group of a multi-agent env), and checks what the transform does on a rollout;
- ``NOT_APPLICABLE``: name -> TorchRL's reason why it does not apply to a batched
  vector env (pixels, downloaded weights, a single env only, replay buffers only...).

Each case runs on an env as ``TransformedEnv(env, transform)``:
``torchrl.envs.utils.check_env_specs``, then a short rollout
(``break_when_any_done=False``) whose every entry must match the transformed specs and
be finite, then the case's own check of the transform's semantics (``StepCounter``
counts, ``RewardSum`` sums, ``CatFrames`` stacks the last frames...).

A case applies to the envs its ``applies`` predicate picks (``needs`` says, in one line,
what it needs: a continuous action, one reward key...). On the other envs either TorchRL
refuses it in a known way, which ``test_transform_refused_on_env`` asserts (``refused``:
the exception, its message, and why), or the pair is not generated (``needs`` says why).
Where TorchRL's own ``check_env_specs`` cannot pass with a transform on any env although
the transform works (``NextObservationDelta`` drops the ``"next"`` observations the specs
declare...), the case asserts that failure (``spec_check``) and checks the rollout as usual.

The full transform x env matrix (``tests/all_envs.py``) is marked ``slow``; the default
run takes every transform on a few representative envs (``DEFAULT_ENVS``), and on the
first env it applies to (or is refused on) when it applies to none of them.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torchrl.envs.transforms as transforms
from tensordict.nn import TensorDictModule
from torchrl.data import Bounded, Categorical, Composite, MultiCategorical, OneHot, Unbounded
from torchrl.data.vla import UniformActionTokenizer
from torchrl.envs import TransformedEnv
from torchrl.envs.transforms import Compose, Transform
from torchrl.envs.utils import check_env_specs

from all_envs import ENVS, make

T = transforms
STEPS = 6  # rollout length: the tiny envs of all_envs.py end episodes within 6-8 steps


# --------------------------------------------------------------------------- the env's keys

def obs_keys(env):
    """The env's observation keys (leaves): ``"observation"``, or one ``(group, "observation")`` per group."""
    return list(env.full_observation_spec.keys(True, True))


def reward_keys(env):
    return list(env.full_reward_spec.keys(True, True))


def action_keys(env):
    return list(env.full_action_spec.keys(True, True))


def sib(key, name):
    """The key ``name`` next to ``key``: ``("agents", name)`` beside ``("agents", "observation")``."""
    return (*key[:-1], name) if isinstance(key, tuple) else name


def suffix(key, tag):
    """``key`` renamed ``<last>_<tag>``, in the same group."""
    last = key[-1] if isinstance(key, tuple) else key
    return sib(key, f"{last}_{tag}")


def _lead(env, key):
    """The batch dims of the Composite that holds ``key`` (``[E]`` or ``[E, n_agents]``)."""
    spec = env.full_observation_spec if key in env.full_observation_spec.keys(True, True) else None
    for full in (env.full_observation_spec, env.full_action_spec, env.full_reward_spec, env.full_done_spec):
        if key in full.keys(True, True):
            spec = full
            break
    parent = spec[key[:-1]] if isinstance(key, tuple) and len(key) > 1 else spec
    return tuple(parent.shape)


def feature_shape(env, key, spec=None):
    """The shape of one agent's entry (the spec's shape after its Composite's batch dims)."""
    spec = spec or _spec(env, key)
    return tuple(spec.shape[len(_lead(env, key)):])


def _spec(env, key):
    for full in (env.full_observation_spec, env.full_action_spec, env.full_reward_spec, env.full_done_spec):
        if key in full.keys(True, True):
            return full[key]
    raise KeyError(key)


def continuous_action_keys(env):
    return [k for k in action_keys(env) if isinstance(env.full_action_spec[k], Bounded)
            and env.full_action_spec[k].domain == "continuous"]


def onehot_action_keys(env):
    return [k for k in action_keys(env) if isinstance(env.full_action_spec[k], OneHot)]


def categorical_action_keys(env):
    """Integer actions of one choice per agent (``Categorical``, not ``MultiCategorical``)."""
    return [k for k in action_keys(env) if type(env.full_action_spec[k]) is Categorical]


def shaped_action_keys(env):
    """Actions with at least one feature dim per agent (continuous, one-hot, multi-discrete)."""
    return [k for k in action_keys(env) if feature_shape(env, k)]


def _compose(*ts):
    ts = [t for t in ts if t is not None]
    return ts[0] if len(ts) == 1 else Compose(*ts)


# --------------------------------------------------------------------------- the cases

@dataclass
class Raises:
    """What TorchRL does where a transform cannot work: raise ``exc`` with a message
    matching ``match`` (a regex, for ``pytest.raises``); ``reason`` says why, in one line."""
    exc: type | tuple
    match: str
    reason: str
    where: Callable = lambda env: True  # the envs (outside ``Case.applies``) it is asserted on


@dataclass
class Case:
    """How to apply one transform to an env, and what to check on a rollout of it.

    ``build(env)`` returns the transform (fresh; the caller wraps the env).
    ``check(td, env, base)`` asserts the transform's semantics on ``td``, a rollout of
    ``env`` (the transformed env; ``base`` is its base env). ``applies(env)`` says
    whether the env has what the transform acts on (a continuous action, a one-hot
    action...); ``needs`` says what, in one line, for the table and the docs.
    ``refused``: on the envs outside ``applies`` that ``refused.where`` picks, TorchRL
    fails in a known way, and ``test_transform_refused_on_env`` asserts that failure
    (the other envs outside ``applies`` get no case: ``needs`` says why).
    ``spec_check``: TorchRL's ``check_env_specs`` fails with this transform on every env,
    for a reason of TorchRL's own (its random actions or its key lookups do not fit what
    the transform does, which works under the case's policy); the test asserts that
    failure, then checks the rollout as for any case.
    ``setup(env)`` runs after wrapping (``ObservationNorm.init_stats``); ``policy(env)``
    gives the rollout's policy where random actions from the specs do not exercise the
    transform (``MultiAction``'s stacked actions); ``action_entry(value)``, the action
    that a rollout's action entry carries, where the policy writes more than the action
    spec (``MeanActionSelector``: ``(action, "mean")``).
    """
    build: Callable
    check: Callable | None = None
    applies: Callable = lambda env: True
    needs: str = ""
    refused: Raises | None = None
    spec_check: Raises | None = None
    setup: Callable | None = None
    policy: Callable | None = None  # policy(env) for the rollout (None: random actions)
    action_entry: Callable | None = None
    drops_next: bool = False  # the transform drops the ("next", observation) entries


def steps_within(td):
    """Mask [E, T] of the steps whose root is not the first of an episode (no reset before it)."""
    done = td["next", "done"].squeeze(-1)
    first = torch.zeros_like(done)
    first[..., 1:] = done[..., :-1]
    first[..., 0] = True
    return ~first


def per_key(env, keys, make_one):
    """One transform per key (composed), e.g. one ``ObservationNorm`` per group."""
    return _compose(*(make_one(k) for k in keys))


# ----- observations -------------------------------------------------------------------------

def _check_pairs(fn, tag, *, where="next"):
    """A check that ``td[where, out] == fn(td[where, in])`` for each observation key."""
    def check(td, env, base):
        for k in obs_keys(base):
            torch.testing.assert_close(td[where, suffix(k, tag)], fn(td[where, k]))
    return check


def _unsqueezed_or_obs(k, env):
    """For transforms that need a 2-D entry: the key itself if it has 2+ feature dims,
    else a ``_u`` copy unsqueezed to ``(d, 1)`` (an UnsqueezeTransform in front)."""
    if len(feature_shape(env, k)) >= 2:
        return k, None
    return suffix(k, "u"), T.UnsqueezeTransform(-1, in_keys=[k], out_keys=[suffix(k, "u")])


def _build_flatten(env):
    parts = []
    for k in obs_keys(env):
        src, pre = _unsqueezed_or_obs(k, env)
        parts += [pre, T.FlattenObservation(-2, -1, in_keys=[src], out_keys=[suffix(k, "flat")])]
    return _compose(*parts)


def _check_flatten(td, env, base):
    for k in obs_keys(base):
        obs = td["next", k]
        want = obs.flatten(-2) if len(feature_shape(base, k)) >= 2 else obs
        torch.testing.assert_close(td["next", suffix(k, "flat")], want)


def _build_permute(env):
    parts = []
    for k in obs_keys(env):
        src, pre = _unsqueezed_or_obs(k, env)
        parts += [pre, T.PermuteTransform([-1, -2], in_keys=[src], out_keys=[suffix(k, "perm")])]
    return _compose(*parts)


def _check_permute(td, env, base):
    for k in obs_keys(base):
        obs = td["next", k]
        want = obs.transpose(-1, -2) if len(feature_shape(base, k)) >= 2 else obs.unsqueeze(-2)
        torch.testing.assert_close(td["next", suffix(k, "perm")], want)


def _build_squeeze(env):
    return _compose(*[t for k in obs_keys(env) for t in (
        T.UnsqueezeTransform(-1, in_keys=[k], out_keys=[suffix(k, "u")]),
        T.SqueezeTransform(-1, in_keys=[suffix(k, "u")], out_keys=[suffix(k, "sq")]))])


def _build_with_square(env, make_last):
    """An UnaryTransform writing ``obs**2`` at ``<obs>_pow``, then ``make_last(obs, pow_key)``."""
    parts = []
    for k in obs_keys(env):
        parts += [T.UnaryTransform(in_keys=[k], out_keys=[suffix(k, "pow")], fn=torch.square),
                  make_last(k, suffix(k, "pow"))]
    return _compose(*parts)


def _check_cat(td, env, base):
    for k in obs_keys(base):
        obs = td["next", k]
        torch.testing.assert_close(td["next", suffix(k, "cat")], torch.cat([obs, obs**2], -1))


def _check_stack(td, env, base):
    for k in obs_keys(base):
        obs = td["next", k]
        torch.testing.assert_close(td["next", suffix(k, "stack")], torch.stack([obs, obs**2], -2))


def _build_catframes(env):
    return T.CatFrames(N=3, dim=-1, in_keys=obs_keys(env), out_keys=[suffix(k, "frames") for k in obs_keys(env)],
                       reset_key="_reset")


def _check_catframes(td, env, base):
    within = steps_within(td)
    for k in obs_keys(base):
        d = feature_shape(base, k)[-1]
        frames, obs = td["next", suffix(k, "frames")], td["next", k]
        assert frames.shape[-1] == 3 * d
        torch.testing.assert_close(frames[..., -d:], obs)            # the newest frame last
        prev = td[suffix(k, "frames")][..., -d:]                      # the frame before it, within an episode
        torch.testing.assert_close(frames[..., -2 * d:-d][within], prev[within])
        reset_obs = td[k][:, 0]                                       # after a reset: padded with the first frame
        torch.testing.assert_close(td[suffix(k, "frames")][:, 0], reset_obs.repeat_interleave(1, -1).tile(3))


def _build_timemaxpool(env):
    return T.TimeMaxPool(in_keys=obs_keys(env), out_keys=[suffix(k, "max") for k in obs_keys(env)], T=3,
                         reset_key="_reset")


def _check_timemaxpool(td, env, base):
    within = steps_within(td)
    for k in obs_keys(base):
        pooled, obs = td["next", suffix(k, "max")], td["next", k]
        assert (pooled >= obs).all()
        # within an episode the max over the last 3 frames is at least the previous frame
        assert (pooled[within] >= td[k][within]).all()


def _build_obsnorm(env):
    return per_key(env, obs_keys(env), lambda k: T.ObservationNorm(
        in_keys=[k], out_keys=[suffix(k, "norm")], standard_normal=True, eps=1e-3))


def _setup_obsnorm(env):
    norms = [t for t in env.transform] if isinstance(env.transform, Compose) else [env.transform]
    for t in norms:
        key = t.in_keys[0]
        ndim = len(_spec(env.base_env, key).shape) + 1  # rollout: [E, T, ...]
        reduce = tuple(range(ndim - 1))                  # all but the features
        t.init_stats(num_iter=STEPS, reduce_dim=reduce, cat_dim=1, key=key)


def _check_obsnorm(td, env, base):
    norms = [t for t in env.transform] if isinstance(env.transform, Compose) else [env.transform]
    for t in norms:
        k = t.in_keys[0]
        assert torch.isfinite(t.loc).all() and (t.scale >= 0).all()
        want = (td["next", k] - t.loc) / t.scale.clamp_min(t.eps)
        torch.testing.assert_close(td["next", suffix(k, "norm")], want)


def _build_vecnorm(cls):
    return lambda env: cls(in_keys=obs_keys(env), out_keys=[suffix(k, "vnorm") for k in obs_keys(env)])


def _check_vecnorm(td, env, base):
    for k in obs_keys(base):
        assert td["next", suffix(k, "vnorm")].shape == td["next", k].shape


def _build_rnd(env):
    def one(k):
        d = feature_shape(env, k)[-1]
        torch.manual_seed(0)
        return T.RNDTransform(torch.nn.Linear(d, 4), torch.nn.Linear(d, 4), in_keys=[k],
                              out_keys=[suffix(k, "intrinsic")])
    return per_key(env, obs_keys(env), one)


def _check_rnd(td, env, base):
    for k in obs_keys(base):
        bonus = td["next", suffix(k, "intrinsic")]
        assert bonus.shape[:-1] == td["next", k].shape[:-1]
        assert (bonus >= 0).all() and (bonus > 0).any()


class _Recorder(torch.nn.Module):
    """Passes its inputs through, keeping a copy of each."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, *actions):
        self.seen.append([a.clone() for a in actions])
        return actions if len(actions) > 1 else actions[0]


def _build_module(env):
    # on the action path (inverse=True): a forward ModuleTransform writing a new observation
    # key fails check_env_specs on any env (TorchRL's own mock envs too): it runs the module
    # on step outputs but not on reset outputs, so the rollout cannot stack them
    keys = action_keys(env)
    return T.ModuleTransform(module=TensorDictModule(_Recorder(), in_keys=keys, out_keys=keys), inverse=True,
                             no_grad=True)


def _check_module(td, env, base):
    seen = env.transform.module.module.seen[-STEPS:]   # the rollout's steps, after check_env_specs'
    assert len(seen) == STEPS
    for t, actions in enumerate(seen):
        for k, a in zip(action_keys(base), actions):
            torch.testing.assert_close(a, td[k][:, t])   # the module saw each action on its way in


def _build_hash(env):
    # TorchRL's default hash reads strings; a tensor's hash here: a reproducible function of its values
    def hash_rows(x, seed=None):
        w = torch.arange(1, x.shape[-1] + 1, dtype=torch.float64, device=x.device)
        return (x.double() * w).sum(-1, keepdim=True).mul(1e6).round().to(torch.int64)
    return T.Hash(in_keys=obs_keys(env), out_keys=[suffix(k, "hash") for k in obs_keys(env)], hash_fn=hash_rows)


def _check_hash(td, env, base):
    for k in obs_keys(base):
        h = td["next", suffix(k, "hash")]
        assert h.dtype == torch.int64
        same = (td["next", k] == td[k]).all(-1, keepdim=True)
        assert (h[same] == td[suffix(k, "hash")][same]).all()  # equal inputs, equal hashes


def _check_delta(td, env, base):
    within = steps_within(td)[:, 1:]  # steps whose next root is the step's own "next"
    for k in obs_keys(base):
        assert k not in td["next"].keys(True, True)  # dropped: the root of the next step has it
        key = k if isinstance(k, tuple) else (k,)
        delta = td["next", "delta", *key]
        assert delta.dtype == torch.float16
        step = (td[k][:, 1:] - td[k][:, :-1])[within]
        torch.testing.assert_close(delta[:, :-1][within].float(), step, atol=2e-3, rtol=2e-3)


def _build_meanaction(env):
    # one selector per group (its observation and action keys), and nearest the base env
    # (the inverse runs last to first) a recorder of the actions that reach it
    keys = action_keys(env)
    recorder = T.ModuleTransform(module=TensorDictModule(_Recorder(), in_keys=keys, out_keys=keys), inverse=True,
                                 no_grad=True)
    return Compose(recorder, *(T.MeanActionSelector(observation_key=k, action_key=sib(k, "action"))
                               for k in obs_keys(env)))


def _belief_policy(env):
    """A Gaussian belief-space policy's output: ``(action, "mean")`` (and its variance)."""
    base = env.base_env

    def policy(td):
        for k in action_keys(base):
            mean = base.full_action_spec[k].rand()
            key = k if isinstance(k, tuple) else (k,)
            td.set((*key, "mean"), mean)
            td.set((*key, "var"), torch.zeros(*mean.shape, mean.shape[-1]))
        return td
    return policy


def _check_meanaction(td, env, base):
    for k in obs_keys(base):
        key = k if isinstance(k, tuple) else (k,)
        for where in ((), ("next",)):  # after a reset and after a step: the belief of a known state
            mean, var = td[(*where, *key, "mean")], td[(*where, *key, "var")]
            assert mean.shape == (*td.batch_size, *_spec(base, k).shape[1:])
            assert var.shape == (*mean.shape, mean.shape[-1]) and (var == 0).all()
    seen = env.transform[0].module.module.seen
    assert len(seen) == STEPS  # check_env_specs' rollout stopped at the selector, before the recorder
    for t, actions in enumerate(seen):
        for k, a in zip(action_keys(base), actions):
            key = k if isinstance(k, tuple) else (k,)
            torch.testing.assert_close(a, td[(*key, "mean")][:, t])  # the base env got the policy's mean


# ----- rewards -----------------------------------------------------------------------------

def _check_reward_fn(fn, tag):
    def check(td, env, base):
        for k in reward_keys(base):
            out = td["next", suffix(k, tag)]
            torch.testing.assert_close(out, fn(td["next", k]).to(out.dtype))
    return check


def _build_rewardsum(env):
    return T.RewardSum(in_keys=reward_keys(env), out_keys=[suffix(k, "episode") for k in reward_keys(env)])


def _check_rewardsum(td, env, base):
    for k in reward_keys(base):
        ep = suffix(k, "episode")
        assert (td[ep][:, 0] == 0).all()
        torch.testing.assert_close(td["next", ep], td[ep] + td["next", k])
        # the root's sum is the previous step's, or 0 after a reset
        within = steps_within(td)
        prev = torch.zeros_like(td[ep])
        prev[:, 1:] = td["next", ep][:, :-1]
        torch.testing.assert_close(td[ep][within], prev[within])
        assert (td[ep][~within] == 0).all()


def _build_target_return(env):
    return T.TargetReturn(10.0, mode="reduce", in_keys=reward_keys(env),
                          out_keys=[suffix(k, "target") for k in reward_keys(env)], reset_key="_reset")


def _check_target_return(td, env, base):
    for k in reward_keys(base):
        target = suffix(k, "target")
        assert (td[target][~steps_within(td)] == 10.0).all()
        torch.testing.assert_close(td["next", target], td[target] - td["next", k])


def _build_linearise(env):
    return T.LineariseRewards(in_keys=reward_keys(env), out_keys=[suffix(k, "lin") for k in reward_keys(env)],
                              weights=[2.0])


# ----- actions -----------------------------------------------------------------------------

def _build_action_scaling(env):
    # one ActionScaling per action key: an instance scales a single action
    return per_key(env, continuous_action_keys(env), lambda k: T.ActionScaling(in_keys_inv=[k]))


def _check_action_scaling(td, env, base):
    for k in continuous_action_keys(base):
        spec, orig = env.full_action_spec[k], base.full_action_spec[k]
        assert spec.shape == orig.shape and (spec.space.low == -1).all() and (spec.space.high == 1).all()
        a = td[k]
        assert ((a >= -1) & (a <= 1)).all()


def _build_discretizer(env):
    return per_key(env, continuous_action_keys(env), lambda k: T.ActionDiscretizer(3, action_key=k))


def _check_discretizer(td, env, base):
    for k in continuous_action_keys(base):
        assert isinstance(env.full_action_spec[k], (Categorical, MultiCategorical))
        assert td[k].dtype == torch.int64 and (td[k] >= 0).all() and (td[k] < 3).all()


def _per_dim_bounds(env, k):
    """One agent's bounds of the continuous action ``k`` (per dim: the speaker's [-1, 1] then [0, 1])."""
    space, d = env.full_action_spec[k].space, feature_shape(env, k)[-1]
    return space.low.reshape(-1, d)[0], space.high.reshape(-1, d)[0]


def _build_tokenizer(env):
    def one(k):
        low, high = _per_dim_bounds(env, k)
        return T.ActionTokenizerTransform(UniformActionTokenizer(16, low=low, high=high), in_key=k,
                                          out_key=suffix(k, "tokens"))
    return per_key(env, continuous_action_keys(env), one)


def _check_tokenizer(td, env, base):
    for k in continuous_action_keys(base):
        assert k not in env.full_action_spec.keys(True, True)  # the policy picks tokens instead
        tokens = td[suffix(k, "tokens")]
        assert tokens.dtype == torch.int64 and (tokens >= 0).all() and (tokens < 16).all()
        low, high = _per_dim_bounds(base, k)
        decoded = low + (tokens + 0.5) * (high - low) / 16  # each token's bin centre, in the base spec
        for t in range(STEPS):
            assert base.full_action_spec[k].is_in(decoded[:, t])


def _build_projection(env):
    # TorchRL's DiscreteActionProjection rewrites the spec of the env's first action key,
    # whatever its action_key (test_discrete_action_projection_takes_the_first_action_key)
    k = action_keys(env)[0]
    n = feature_shape(env, k)[-1]
    return T.DiscreteActionProjection(num_actions_effective=n, max_actions=n + 2, action_key=k)


def _check_projection(td, env, base):
    k = action_keys(base)[0]
    n = feature_shape(base, k)[-1]
    assert env.full_action_spec[k].space.n == n + 2
    assert td[k].shape[-1] == n + 2 and (td[k].sum(-1) == 1).all()
    for other in action_keys(base)[1:]:
        assert env.full_action_spec[other] == base.full_action_spec[other]


def _joint_key(k):
    """Where a group's flattened (joint) action goes: a root key (``[E, n_agents * d]``
    cannot sit in the group's TensorDict, whose batch is ``[E, n_agents]``)."""
    return f"{k[0]}_joint_action"


def _flattened_action_keys(env):
    """The action keys FlattenAction is given: the actions with a feature dim but one-hot
    ones (flattening the agents of a group into a one-hot makes no one-hot)."""
    return [k for k in shaped_action_keys(env) if not isinstance(env.full_action_spec[k], OneHot)]


def _build_flatten_action(env):
    parts = []
    for k in _flattened_action_keys(env):
        if isinstance(k, tuple):  # a group: its agents' actions flattened into one joint action
            parts.append(T.FlattenAction(-2, -1, in_keys_inv=[k], out_keys_inv=[_joint_key(k)]))
        else:  # a single agent's [E, d]: unsqueezed to [E, d, 1] first, flattened back
            parts += [T.UnsqueezeTransform(-1, in_keys_inv=[k]), T.FlattenAction(-2, -1, in_keys_inv=[k])]
    return _compose(*parts)


def _check_flatten_action(td, env, base):
    for k in _flattened_action_keys(base):
        orig = base.full_action_spec[k]
        if not isinstance(k, tuple):
            assert env.full_action_spec[k].shape == orig.shape
            assert td[k].shape[2:] == orig.shape[1:]
            continue
        assert k not in env.full_action_spec.keys(True, True)
        flat, lead = env.full_action_spec[_joint_key(k)], orig.shape[:-2]
        n, d = orig.shape[-2:]
        assert flat.shape == (*lead, n * d)
        torch.testing.assert_close(flat.space.low, orig.space.low.flatten(-2))
        torch.testing.assert_close(flat.space.high, orig.space.high.flatten(-2))
        for t in range(STEPS):  # each joint action, unflattened, is the group's actions
            assert orig.is_in(td[_joint_key(k)][:, t].unflatten(-1, (n, d)))


def _build_action_mask(env):
    """A mask that forbids action 0 where the first observation entry is positive (an
    UnaryTransform computes it), then ActionMask: random actions must respect it."""
    parts = []
    for k in categorical_action_keys(env):
        obs = sib(k, "observation")
        n = env.full_action_spec[k].space.n

        def fn(o, n=n):
            mask = torch.ones(*o.shape[:-1], n, dtype=torch.bool, device=o.device)
            mask[..., 0] = o[..., 0] <= 0
            return mask
        parts += [T.UnaryTransform(in_keys=[obs], out_keys=[sib(k, "action_mask")], fn=fn),
                  T.ActionMask(action_key=k, mask_key=sib(k, "action_mask"))]
    return _compose(*parts)


def _check_action_mask(td, env, base):
    for k in categorical_action_keys(base):
        mask = td[sib(k, "action_mask")]
        assert mask.gather(-1, td[k].unsqueeze(-1)).all()


def _chunk_keys(env):
    """Where the policy writes the stacked actions: the action keys of a single-agent env;
    for groups, one root key each (a chunk ``[E, k, n_agents, ...]`` cannot sit in the
    group's TensorDict, whose batch is ``[E, n_agents]``)."""
    return [k if not isinstance(k, tuple) else f"{k[0]}_chunk" for k in action_keys(env)]


def _build_multi_action(env):
    keys, chunks = action_keys(env), _chunk_keys(env)
    grouped = isinstance(keys[0], tuple)
    # stack_rewards=True stacks the group rewards along the root's dim 1 and fails to write
    # them back into the groups ([E, n_agents] batches): TorchRL's limitation, so the
    # multi-agent envs keep the last reward
    multi = T.MultiAction(stack_rewards=not grouped, action_key=keys[0], chunk_key=chunks[0])
    # one key per group: MultiAction's inverse and spec transform take lists of them
    multi.in_keys_inv, multi.out_keys_inv = keys, chunks
    return Compose(T.StepCounter(step_count_key="inner_count"), multi)


def _multi_action_policy(env):
    base = env.base_env

    def policy(td):  # two actions per step
        for k, c in zip(action_keys(base), _chunk_keys(base)):
            spec = base.full_action_spec[k]
            td.set(c, torch.stack([spec.rand(), spec.rand()], 1))
        return td
    return policy


def _check_multi_action(td, env, base):
    step = td["next", "inner_count"] - td["inner_count"]
    done = td["next", "done"].reshape(step.shape)
    assert ((step == 2) | (done & (step == 1))).all()  # 2 inner steps, 1 if done after the first
    assert (step == 2).any()
    if not isinstance(action_keys(base)[0], tuple):
        assert td["next", "reward"].shape == (*td.batch_size, 2, 1)  # stacked rewards


def _build_macro(env):
    return Compose(T.StepCounter(step_count_key="inner_count"), *(T.MacroPrimitiveTransform(
        action_key=k, macro_steps=2, execute=True, action_dim=feature_shape(env, k)[-1])
        for k in continuous_action_keys(env)))


def _check_macro(td, env, base):
    k = continuous_action_keys(base)[0]
    assert set(env.full_action_spec[k].keys()) == {"mode", "target"}  # the policy picks a macro action
    step = td["next", "inner_count"] - td["inner_count"]
    done = td["next", "done"].reshape(step.shape)
    assert ((step == 2) | (done & (step == 1))).all()  # 2 interpolated low-level steps per macro action
    assert td["next", "reward"].shape == (*td.batch_size, 2, 1)  # their rewards, stacked


# ----- done, counters, steps ---------------------------------------------------------------

def _check_step_counter(td, env, base):
    count, nxt = td["step_count"], td["next", "step_count"]
    assert (count[:, 0] == 0).all()
    assert (nxt == count + 1).all()
    assert (nxt <= 3).all()
    assert (td["next", "truncated"][nxt == 3]).all() and (td["next", "done"][nxt == 3]).all()


def _check_init_tracker(td, env, base):
    init = td["is_init"].squeeze(-1)
    assert init[:, 0].all()
    torch.testing.assert_close(init, ~steps_within(td))
    assert not td["next", "is_init"].any()


def _check_traj_counter(td, env, base):
    traj = td["traj_count"].squeeze(-1)
    within = steps_within(td)
    prev = torch.zeros_like(traj)
    prev[:, 1:] = traj[:, :-1]
    assert (traj[within] == prev[within]).all()          # one id per trajectory
    starts = traj[~within]
    assert starts.unique().numel() == starts.numel()      # a new id for each new one


def _check_random_truncation(td, env, base):
    assert (td["next", "step_count"] <= 4).all()


def _check_terminate(td, env, base):
    hit = td["next", "step_count"] >= 2
    assert td["next", "terminated"][hit].all() and td["next", "done"][hit].all()


def _check_frame_skip(td, env, base):
    inner, outer = td["next", "inner_count"], td["next", "step_count"]
    within_first = outer == inner // 2 + inner % 2  # each outer step is 2 inner ones (fewer when done)
    assert (inner <= 2 * outer).all() and (inner >= outer).all()
    assert within_first.any()


def _build_conditional_skip(env):
    def cond(td):  # env 0 never steps
        skip = torch.zeros(td.batch_size, dtype=torch.bool, device=td.device)
        skip[0] = True
        return skip.unsqueeze(-1)
    return T.ConditionalSkip(cond)


def _check_conditional_skip(td, env, base):
    for k in obs_keys(base):
        torch.testing.assert_close(td["next", k][0], td[k][0])        # skipped: the obs stays
    for k in reward_keys(base):
        assert (td["next", k][0] == 0).all()
    assert not td["next", "done"][0].any()


def _build_policy_switch(env):
    def switch_policy(td):  # the switched-to policy: the env's random action
        return td.update(env.full_action_spec.rand())
    return T.ConditionalPolicySwitch(policy=switch_policy, condition=lambda td: torch.tensor(False))


def _build_gsde(env):
    s = feature_shape(env, obs_keys(env)[0])[-1]
    a = (feature_shape(env, action_keys(env)[0]) or (1,))[-1]
    return T.gSDENoise(state_dim=s, action_dim=a, shape=env.batch_size, reset_key="_reset")


def _check_gsde(td, env, base):
    eps = td["_eps_gSDE"]
    assert eps.shape[:2] == td.batch_size and torch.isfinite(eps).all() and eps.std() > 0


def _groups(env):
    """The env's groups: ``{group: n_agents}`` (empty for a single-agent env)."""
    return {k[0]: _lead(env, k)[-1] for k in obs_keys(env) if isinstance(k, tuple)}


def _build_primer(env):
    # a root entry, and one in each group's Composite (its shape: [E, n_agents, 4]); the
    # root "_reset" names the envs to reset (an env with per-group done flags has one
    # reset key per group too, so TensorDictPrimer cannot pick one itself)
    E = tuple(env.batch_size)
    specs = {"hidden": Unbounded(shape=(*E, 4), device=env.device)}
    for group, n in _groups(env).items():
        specs[group] = Composite(hidden=Unbounded(shape=(*E, n, 4), device=env.device), shape=(*E, n),
                                 device=env.device)
    return T.TensorDictPrimer(Composite(specs, shape=E, device=env.device), default_value=0.5, reset_key="_reset")


def _check_primer(td, env, base):
    assert (td["hidden"] == 0.5).all() and td["hidden"].shape == (*td.batch_size, 4)
    assert (td["next", "hidden"] == 0.5).all()
    for group, n in _groups(base).items():
        assert env.full_observation_spec[group, "observation"] == base.full_observation_spec[group, "observation"]
        hidden = td[group, "hidden"]
        assert (hidden == 0.5).all() and hidden.shape == (*td.batch_size, n, 4)


def _check_timer(td, env, base):
    for key in ("time_step", "time_policy"):
        assert (td["next", key] >= 0).all() if ("next", key) in td.keys(True) else (td[key] >= 0).all()


def _build_batch_size(env):
    t = T.BatchSizeTransform(reshape_fn=lambda data: data.unsqueeze(-1))
    # TorchRL's BatchSizeTransform reshapes the step's inputs back to the base env's batch
    # size but, by default, not a reset's: the base env would get "_reset" as [E, 1, 1]
    # (TorchRL's own CountingEnv fails there too); its inverse on reset maps it back
    t.enable_inv_on_reset = True
    return t


def _check_batch_size(td, env, base):
    assert env.batch_size == (*base.batch_size, 1)
    assert td.batch_size == (*base.batch_size, 1, STEPS)
    # a partial reset (env 0 only) through the new batch size: the others keep their state
    first = obs_keys(base)[0]
    state = env.rand_step(env.reset())["next"]
    mask = torch.zeros(env.full_done_spec["done"].shape, dtype=torch.bool, device=env.device)
    mask[0] = True
    out = env.reset(state.clone().set("_reset", mask))
    assert out.batch_size == env.batch_size
    torch.testing.assert_close(out[first][1:], state[first][1:])


def _check_same_keys(td, env, base):
    ref = base.rollout(2, break_when_any_done=False)
    assert set(td.keys(True, True)) >= set(ref.keys(True, True))


def _check_expand(td, env, base):
    for k in reward_keys(base):
        out = td["next", suffix(k, "done")]
        assert out.shape == td["next", k].shape
        assert (out == td["next", "done"].reshape(*td["next", "done"].shape[:2], *[1] * (out.ndim - 3), 1)).all()


def _build_expand(env):
    return _compose(*(T.ExpandAs(in_key="done", ref_key=k, out_key=suffix(k, "done")) for k in reward_keys(env)))


def _check_success(td, env, base):
    torch.testing.assert_close(td["next", "success_reward"], 3.0 * td["next", "terminated"].float())


# ----- the tables ---------------------------------------------------------------------------

HAS_CONTINUOUS = dict(applies=lambda env: bool(continuous_action_keys(env)), needs="a continuous (Bounded) action")


def _one_reward(env):
    return len(reward_keys(env)) == 1


def _root_rewards(env):
    return all(not isinstance(k, tuple) for k in reward_keys(env))


def _rewards_of_one_shape(env):
    return len({tuple(_spec(env, k).shape) for k in reward_keys(env)}) == 1


def _multicategorical_actions(env):
    return any(isinstance(env.full_action_spec[k], MultiCategorical) for k in action_keys(env))


def _continuous_actions_only(env):
    return bool(action_keys(env)) and continuous_action_keys(env) == action_keys(env)


APPLICABLE: dict[str, Case] = {
    # observations
    "CatFrames": Case(_build_catframes, _check_catframes),
    "CatTensors": Case(lambda env: _build_with_square(env, lambda k, p: T.CatTensors(
        [k, p], out_key=suffix(k, "cat"), del_keys=False, sort=False)), _check_cat),
    "ClipTransform": Case(lambda env: T.ClipTransform(
        in_keys=obs_keys(env), out_keys=[suffix(k, "clip") for k in obs_keys(env)], low=-0.5, high=0.5),
        _check_pairs(lambda x: x.clamp(-0.5, 0.5), "clip")),
    "DTypeCastTransform": Case(lambda env: T.DTypeCastTransform(
        torch.float32, torch.float64, in_keys=obs_keys(env), out_keys=[suffix(k, "f64") for k in obs_keys(env)]),
        _check_pairs(lambda x: x.double(), "f64")),
    "DoubleToFloat": Case(lambda env: Compose(
        T.DTypeCastTransform(torch.float32, torch.float64, in_keys=obs_keys(env),
                             out_keys=[suffix(k, "f64") for k in obs_keys(env)]),
        T.DoubleToFloat(in_keys=[suffix(k, "f64") for k in obs_keys(env)],
                        out_keys=[suffix(k, "f32") for k in obs_keys(env)])),
        _check_pairs(lambda x: x, "f32")),
    "DeviceCastTransform": Case(lambda env: T.DeviceCastTransform(env.device, env.device)),
    "ExcludeTransform": Case(lambda env: T.ExcludeTransform(obs_keys(env)[0]),
                             lambda td, env, base: (obs_keys(base)[0] not in td["next"].keys(True))
                             or pytest.fail("excluded key still there")),
    "FlattenObservation": Case(_build_flatten, _check_flatten),
    "Hash": Case(_build_hash, _check_hash),
    "ModuleTransform": Case(_build_module, _check_module),
    "NextObservationDelta": Case(
        lambda env: T.NextObservationDelta(obs_keys(env)), _check_delta, drops_next=True,
        spec_check=Raises(KeyError, r'key "observation" not found in TensorDict',
                          "check_env_specs looks up every observation key in the step's \"next\", which the "
                          "transform drops there (the observation spec keeps them)")),
    "ObservationNorm": Case(_build_obsnorm, _check_obsnorm, setup=_setup_obsnorm),
    "PermuteTransform": Case(_build_permute, _check_permute),
    "RNDTransform": Case(
        _build_rnd, _check_rnd, applies=_rewards_of_one_shape, needs="rewards of one shape (one group size)",
        refused=Raises(ValueError, r"The shapes of the spec UnboundedContinuous and the Composite mismatch",
                       "RNDTransform gives every out key the shape of the env's first reward key, which the "
                       "Composite of a group of another size cannot hold")),
    "RenameTransform": Case(lambda env: T.RenameTransform(obs_keys(env), [suffix(k, "renamed") for k in obs_keys(env)]),
                            lambda td, env, base: [td["next", suffix(k, "renamed")] for k in obs_keys(base)]),
    "SelectTransform": Case(lambda env: T.SelectTransform(obs_keys(env)[0])),
    "SignTransform": Case(lambda env: T.SignTransform(
        in_keys=obs_keys(env), out_keys=[suffix(k, "sign") for k in obs_keys(env)]),
        _check_pairs(torch.sign, "sign")),
    "SqueezeTransform": Case(_build_squeeze, _check_pairs(lambda x: x, "sq")),
    "Stack": Case(lambda env: _build_with_square(env, lambda k, p: T.Stack(
        [k, p], out_key=suffix(k, "stack"), dim=-2, del_keys=False)), _check_stack),
    "TimeMaxPool": Case(_build_timemaxpool, _check_timemaxpool),
    "UnaryTransform": Case(lambda env: T.UnaryTransform(
        in_keys=obs_keys(env), out_keys=[suffix(k, "abs") for k in obs_keys(env)], fn=torch.abs),
        _check_pairs(torch.abs, "abs")),
    "UnsqueezeTransform": Case(lambda env: T.UnsqueezeTransform(
        -1, in_keys=obs_keys(env), out_keys=[suffix(k, "u") for k in obs_keys(env)]),
        _check_pairs(lambda x: x.unsqueeze(-1), "u")),
    "VecNorm": Case(_build_vecnorm(T.VecNorm), _check_vecnorm),
    "VecNormV2": Case(_build_vecnorm(T.VecNormV2), _check_vecnorm),
    # rewards
    "BinarizeReward": Case(lambda env: T.BinarizeReward(
        in_keys=reward_keys(env), out_keys=[suffix(k, "bin") for k in reward_keys(env)]),
        _check_reward_fn(lambda r: r > 0, "bin")),
    "LineariseRewards": Case(_build_linearise, _check_reward_fn(lambda r: 2 * r, "lin")),
    "RewardClipping": Case(lambda env: T.RewardClipping(
        -0.1, 0.1, in_keys=reward_keys(env), out_keys=[suffix(k, "clip") for k in reward_keys(env)]),
        _check_reward_fn(lambda r: r.clamp(-0.1, 0.1), "clip")),
    "RewardScaling": Case(lambda env: T.RewardScaling(
        1.0, 2.0, in_keys=reward_keys(env), out_keys=[suffix(k, "scaled") for k in reward_keys(env)]),
        _check_reward_fn(lambda r: 2 * r + 1, "scaled")),
    "RewardSum": Case(_build_rewardsum, _check_rewardsum),
    "SuccessReward": Case(lambda env: T.SuccessReward("terminated", "success_reward", scale=3.0), _check_success),
    "TargetReturn": Case(
        _build_target_return, _check_target_return, applies=_root_rewards, needs="a reward at the root [*batch, 1]",
        refused=Raises((RuntimeError, ValueError),
                       r"batch dimension mismatch|The shape of the reward .* and target return .* must match",
                       "TargetReturn starts each target at the root's shape (*batch, 1), which a group's "
                       "reward [*batch, n_agents, 1] does not have")),
    # actions
    "ActionDiscretizer": Case(_build_discretizer, _check_discretizer, **HAS_CONTINUOUS),
    "ActionMask": Case(_build_action_mask, _check_action_mask,
                       applies=lambda env: bool(categorical_action_keys(env)), needs="a Categorical action"),
    "ActionScaling": Case(_build_action_scaling, _check_action_scaling, **HAS_CONTINUOUS),
    "ActionTokenizerTransform": Case(_build_tokenizer, _check_tokenizer, **HAS_CONTINUOUS),
    "DiscreteActionProjection": Case(
        _build_projection, _check_projection,
        applies=lambda env: isinstance(env.full_action_spec[action_keys(env)[0]], OneHot),
        needs="a one-hot first action key: DiscreteActionProjection rewrites the first action key's spec"),
    "FlattenAction": Case(
        _build_flatten_action, _check_flatten_action, applies=_continuous_actions_only,
        needs="continuous actions: FlattenAction rebuilds the bounds of a continuous spec, sets the shape of others",
        refused=Raises(RuntimeError, r"must match the size of tensor b|batch dimension mismatch",
                       "FlattenAction sets a MultiCategorical's shape but not its nvec, so its samples keep "
                       "the unflattened shape (or fail to broadcast)", where=_multicategorical_actions)),
    "MacroPrimitiveTransform": Case(
        _build_macro, _check_macro, applies=lambda env: continuous_action_keys(env) == ["action"],
        needs="one continuous action, at the root",
        refused=Raises(ValueError, r"The shapes of the spec BoundedContinuous and the Composite mismatch",
                       "the MultiAction it composes stacks the low-level actions at dim 1, which a group's "
                       "Composite [*batch, n_agents] cannot hold",
                       where=lambda env: bool(continuous_action_keys(env)))),
    "MultiAction": Case(
        _build_multi_action, _check_multi_action, policy=_multi_action_policy,
        applies=lambda env: not onehot_action_keys(env), needs="no one-hot action",
        refused=Raises(RuntimeError, r"Trying to create tensor with negative dimension -1",
                       "TorchRL's OneHot.rand cannot sample the dynamic (-1) dim of MultiAction's stacked actions "
                       "(its masked path can)")),
    "MeanActionSelector": Case(
        _build_meanaction, _check_meanaction, applies=_continuous_actions_only,
        needs="continuous actions (a Gaussian belief policy's mean)", policy=_belief_policy,
        action_entry=lambda action: action["mean"],
        spec_check=Raises(ValueError, r"Expected a TensorDictBase instance but got <class 'torch.Tensor'> "
                                      r"instead for key '\('mean',\)'",
                          "MeanActionSelector keeps the base action spec, so check_env_specs' random actions are "
                          "tensors, through which its inverse reads (action, \"mean\")")),
    # done, steps, counters, state
    "BatchSizeTransform": Case(_build_batch_size, _check_batch_size),
    "Compose": Case(lambda env: Compose(T.StepCounter(3), T.RewardSum(
        in_keys=reward_keys(env), out_keys=[suffix(k, "episode") for k in reward_keys(env)])),
        lambda td, env, base: (_check_step_counter(td, env, base), _check_rewardsum(td, env, base))),
    "ConditionalPolicySwitch": Case(_build_policy_switch),
    "ConditionalSkip": Case(_build_conditional_skip, _check_conditional_skip),
    "ExpandAs": Case(_build_expand, _check_expand),
    "FiniteTensorDictCheck": Case(lambda env: T.FiniteTensorDictCheck()),
    "FrameSkipTransform": Case(
        lambda env: Compose(T.StepCounter(step_count_key="inner_count"), T.FrameSkipTransform(2), T.StepCounter()),
        _check_frame_skip, applies=_one_reward, needs="one reward key",
        refused=Raises(KeyError, "reward_key requested but more than one key present in the environment",
                       "FrameSkipTransform sums the parent's `reward_key`, which TorchRL does not pick among "
                       "one reward per group")),
    "InitTracker": Case(lambda env: T.InitTracker(), _check_init_tracker),
    "PinMemoryTransform": Case(
        lambda env: T.PinMemoryTransform(), applies=lambda env: torch.cuda.is_available(),
        needs="a CUDA device (pinned memory is for copies to one)",
        refused=Raises(RuntimeError, "Cannot access accelerator device when none is available",
                       "torch cannot pin memory without an accelerator (this machine has none)")),
    "PolicyAgeFilter": Case(lambda env: T.PolicyAgeFilter(0, 1), _check_same_keys),
    "RandomTruncationTransform": Case(lambda env: Compose(
        T.StepCounter(), T.RandomTruncationTransform(2, 4, prob=1.0)), _check_random_truncation),
    "RemoveEmptySpecs": Case(lambda env: T.RemoveEmptySpecs(), _check_same_keys),
    "StepCounter": Case(lambda env: T.StepCounter(3), _check_step_counter),
    "TensorDictPrimer": Case(_build_primer, _check_primer),
    "TerminateTransform": Case(lambda env: Compose(
        T.StepCounter(), T.TerminateTransform(lambda td: td["step_count"] >= 2)), _check_terminate),
    "Timer": Case(lambda env: T.Timer(), _check_timer),
    "TrajCounter": Case(lambda env: Compose(T.StepCounter(2), T.TrajCounter()), _check_traj_counter),
    "gSDENoise": Case(_build_gsde, _check_gsde),
}

_PIXELS = "needs pixel observations (an image [..., C, H, W] or [..., H, W, C]); these envs observe vectors"
NOT_APPLICABLE: dict[str, str] = {
    "Transform": "the base class: an identity with no keys, subclassed by every transform here",
    "ObservationTransform": "a base class for observation transforms, subclassed (not used as is)",
    "RayTransform": "a base class for transforms that run in Ray actors: subclasses implement `_create_actor`",
    "CenterCrop": _PIXELS,
    "Crop": _PIXELS,
    "GrayScale": _PIXELS,
    "Resize": _PIXELS,
    "ToTensorImage": _PIXELS,
    "R3MTransform": "needs pixels and the R3M ResNet weights (downloaded)",
    "VIPTransform": "needs pixels and the VIP ResNet weights (downloaded)",
    "VIPRewardTransform": "needs pixels and the VIP ResNet weights (downloaded), and a goal image",
    "VC1Transform": "needs pixels and the VC-1 ViT weights (downloaded)",
    "Tokenizer": "an LLM transform: needs a `transformers` tokenizer (downloaded) and string entries",
    "DecodeVideoTransform": "replay-buffer sample path only: decodes `VideoClipRef` video leaves (torchcodec)",
    "NoopResetEnv": "single env only: `ValueError: The parent environment batch-size is non-null. "
                    "NoopResetEnv is designed to work on single env instances`",
    "EndOfLifeTransform": "needs a Gym env with a `lives` method (Atari's ALE)",
    "VecGymEnvTransform": "for GymWrapper's auto-resetting gym vector envs only (reads their `final` observation)",
    "AutoResetTransform": "for envs that reset themselves inside `step` (`auto_reset=True`, an `AutoResetEnv`); "
                          "these envs reset through `reset`",
    "ActionChunkTransform": "a data transform that builds training targets from time-structured data "
                            "(`[*B, T, action_dim]`); it never touches the environment",
    "BurnInTransform": "a replay-buffer transform that burns in recurrent states over sampled sequences, "
                       "'not an environment transform'",
    "MultiStepTransform": "a replay-buffer transform (n-step returns on `extend`)",
    "NextStateReconstructor": "a replay-buffer transform (rebuilds `next` observations at sampling)",
    "RandomCropTensorDict": "a replay-buffer and module transform: 'it cannot be used as an environment transform'",
    "Reward2GoTransform": "inverse-only, for replay buffers: `ValueError` when appended to an env "
                          "(the reward-to-go needs the finished episode)",
    "SatelliteAttitudeTransform": "specific to TorchRL's MuJoCo satellite env (CMG gimbal rates)",
    "URScriptPrimitiveTransform": "specific to TorchRL's MuJoCo UR robot-arm envs (URScript primitives)",
}


def exported_transforms() -> set[str]:
    """Every Transform subclass that ``torchrl.envs.transforms`` exports."""
    names = set()
    for name in getattr(transforms, "__all__", dir(transforms)):
        obj = getattr(transforms, name, None)
        if inspect.isclass(obj) and issubclass(obj, Transform):
            names.add(name)
    return names


# --------------------------------------------------------------------------- the tests

def test_tables_cover_every_exported_transform():
    exported = exported_transforms()
    assert len(exported) > 50  # the enumeration found TorchRL's transforms
    both = set(APPLICABLE) & set(NOT_APPLICABLE)
    assert not both, f"in both tables: {sorted(both)}"
    missing = exported - set(APPLICABLE) - set(NOT_APPLICABLE)
    assert not missing, f"TorchRL exports transforms in neither table (add them): {sorted(missing)}"
    stale = (set(APPLICABLE) | set(NOT_APPLICABLE)) - exported
    assert not stale, f"no longer exported by TorchRL (remove them): {sorted(stale)}"


def test_not_applicable_reasons_are_given():
    for name, reason in NOT_APPLICABLE.items():
        assert isinstance(reason, str) and len(reason) > 20, name


#: the default run: a single-agent discrete env, a single-agent continuous one, Tag (two
#: groups with per-agent done flags), an MPE env whose groups differ (continuous), and the
#: test env whose groups differ in observation rank and action type
DEFAULT_ENVS = ("cartpole", "pendulum", "tag_scan", "simple_speaker_listener", "speakers")

_BASES = {}


def _base(env_name):
    """One instance per env for the table's ``applies`` (nothing is compiled until it runs)."""
    if env_name not in _BASES:
        _BASES[env_name] = make(env_name)
    return _BASES[env_name]


def _refused(case, base):
    return not case.applies(base) and case.refused is not None and case.refused.where(base)


def _pairs(select):
    """(transform, env, in the default run) for every pair that ``select(case, base)`` picks;
    the default run takes the pairs on ``DEFAULT_ENVS``, or the first pair when none is there."""
    pairs = []
    for name, case in sorted(APPLICABLE.items()):
        envs = [e for e in ENVS if select(case, _base(e))]
        default = [e for e in envs if e in DEFAULT_ENVS] or envs[:1]
        pairs += [(name, e, e in default) for e in envs]
    # grouped by env: each env's kernels compile once per process
    order = {e: i for i, e in enumerate(ENVS)}
    return sorted(pairs, key=lambda p: (order[p[1]], p[0]))


MATRIX = _pairs(lambda case, base: case.applies(base))  # the pairs where the transform applies
REFUSED = _pairs(_refused)                              # the pairs where TorchRL refuses it
#: the cases that apply only on some machines: PinMemoryTransform without CUDA applies nowhere
MACHINE_BOUND = set() if torch.cuda.is_available() else {"PinMemoryTransform"}


def test_every_case_runs_somewhere():
    applied = {name for name, _, _ in MATRIX}
    assert applied == set(APPLICABLE) - MACHINE_BOUND, sorted(set(APPLICABLE) - MACHINE_BOUND - applied)
    assert MACHINE_BOUND <= {name for name, _, _ in REFUSED}  # where it applies nowhere: its refusal
    default = {name for name, _, d in MATRIX + REFUSED if d}
    assert default == set(APPLICABLE)
    for env_name in ENVS:  # and every env gets most of them
        n = sum(1 for _, e, _ in MATRIX if e == env_name)
        assert n >= len(APPLICABLE) - len(MACHINE_BOUND) - 12, (env_name, n)


def test_every_exclusion_says_why():
    """A case that leaves an env out says why (``needs``); a refusal or a failing
    ``check_env_specs`` says why TorchRL fails, and is asserted on some env."""
    refused = {name for name, _, _ in REFUSED}
    for name, case in APPLICABLE.items():
        if any(not case.applies(_base(e)) for e in ENVS):
            assert len(case.needs) > 10, name
        if case.refused is not None:
            assert len(case.refused.reason) > 20, name
            # asserted somewhere, unless it applies everywhere (PinMemoryTransform with CUDA)
            assert name in refused or all(case.applies(_base(e)) for e in ENVS), name
        if case.spec_check is not None:
            assert len(case.spec_check.reason) > 20, name


def _params(pairs):
    return [pytest.param(name, env_name, marks=[] if default else [pytest.mark.slow], id=f"{env_name}-{name}")
            for name, env_name, default in pairs]


def _assert_matches_specs(td, env, drops_next=False, action_entry=None):
    """Every entry of the rollout (the root: after a reset or the previous step; "next":
    after a step) has its spec's shape and dtype and lies in it. ``action_entry`` maps a
    rollout's action entry to the action it carries (``Case.action_entry``)."""
    n_lead = len(env.batch_size)
    same = lambda value: value  # noqa: E731
    where = [(env.full_observation_spec, () if drops_next else ("next",), same),
             (env.full_observation_spec, (), same), (env.full_reward_spec, ("next",), same),
             (env.full_done_spec, ("next",), same), (env.full_done_spec, (), same),
             (env.full_action_spec, (), action_entry or same)]
    for spec, prefix, entry in where:
        for key, leaf in spec.items(True, True):
            key_t = key if isinstance(key, tuple) else (key,)
            value = entry(td[(*prefix, *key_t)])
            want = (*leaf.shape[:n_lead], td.shape[-1], *leaf.shape[n_lead:])
            assert len(value.shape) == len(want) and all(w in (v, -1) for v, w in zip(value.shape, want)), \
                (prefix, key, value.shape, want)  # -1: a dynamic dim (MultiAction's stacks)
            assert value.dtype == leaf.dtype, (prefix, key, value.dtype, leaf.dtype)
            if getattr(leaf, "mask", None) is not None:  # ActionMask's: the last step's (its check takes each step's)
                leaf = leaf.clone()
                leaf.update_mask(None)
            for t in range(td.shape[-1]):
                assert leaf.is_in(value.select(n_lead, t)), (prefix, key, t)


def _assert_finite(td):
    for key, value in td.items(True, True):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            assert torch.isfinite(value).all(), key


def run_case(name, env_name, device="cpu"):
    case = APPLICABLE[name]
    base = make(env_name, device=device, seed=0)
    env = TransformedEnv(base, case.build(base))
    if case.setup is not None:
        case.setup(env)
    if case.spec_check is None:
        check_env_specs(env, seed=0)
    else:  # TorchRL's checker fails with this transform on any env (Case.spec_check says why)
        with pytest.raises(case.spec_check.exc, match=case.spec_check.match):
            check_env_specs(env, seed=0)
    torch.manual_seed(0)
    policy = case.policy(env) if case.policy is not None else None
    td = env.rollout(STEPS, policy, break_when_any_done=False)
    assert td.batch_size == (*env.batch_size, STEPS)
    _assert_matches_specs(td, env, case.drops_next, case.action_entry)
    _assert_finite(td)
    if case.check is not None:
        case.check(td, env, base)
    return td


@pytest.mark.parametrize("name,env_name", _params(MATRIX))
def test_transform_on_env(name, env_name):
    run_case(name, env_name)


@pytest.mark.parametrize("name,env_name", _params(REFUSED))
def test_transform_refused_on_env(name, env_name):
    """Where a case does not apply, TorchRL fails as its table entry says (``Case.refused``)."""
    case = APPLICABLE[name]
    base = make(env_name, seed=0)
    with pytest.raises(case.refused.exc, match=case.refused.match):
        check_env_specs(TransformedEnv(base, case.build(base)), seed=0)


def test_discrete_action_projection_takes_the_first_action_key():
    """Why the projection case projects the first action key only: TorchRL's
    DiscreteActionProjection rewrites the spec of the env's first action key whatever
    its ``action_key``, so projecting another one refuses that one's actions."""
    base = _base("simple_speaker_listener_one_hot")
    first, second = action_keys(base)
    n = feature_shape(base, second)[-1]
    env = TransformedEnv(base, T.DiscreteActionProjection(num_actions_effective=n, max_actions=n + 2,
                                                          action_key=second))
    assert env.full_action_spec[first].space.n == n + 2            # the first key's spec took it
    assert env.full_action_spec[second] == base.full_action_spec[second]
    td = env.full_action_spec.rand()                                 # no kernel runs: the inverse refuses
    with pytest.raises(RuntimeError, match=rf"action.shape\[-1\]={n} must match self.max_actions={n + 2}"):
        env.transform.inv(td)


SIM_SAMPLE = [("StepCounter", "cartpole"), ("RewardSum", "speakers"), ("CatFrames", "movers"),
              ("VecNormV2", "movers"), ("InitTracker", "speakers")]


@pytest.mark.sim
@pytest.mark.parametrize("name,env_name", SIM_SAMPLE, ids=[f"{e}-{n}" for n, e in SIM_SAMPLE])
def test_transform_sample_runs_the_backend(name, env_name, expected_backend):
    """A few stateful transforms, on the CUDA kernels under the simulator (and on the CPU backend)."""
    assert make(env_name).backend == expected_backend
    run_case(name, env_name)


def test_the_docs_list_what_does_not_apply_and_what_needs_what():
    """docs/environments.md's "TorchRL transforms": every transform of NOT_APPLICABLE with its
    reason, every case restricted to some envs (``needs``) or failing TorchRL's spec check."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "environments.md").read_text()
    section = text.split("## TorchRL transforms\n", 1)[1].split("\n## ", 1)[0]
    for name, reason in NOT_APPLICABLE.items():
        assert f"| `{name}` | {reason.replace('|', '/')} |" in section, name
    restricted = [name for name, case in APPLICABLE.items() if case.needs or case.spec_check]
    assert restricted and all(f"`{name}`" in section for name in restricted), restricted
    assert f"exports (torchrl {torchrl_version()}: {len(exported_transforms())})" in " ".join(section.split())
    assert f"{len(APPLICABLE)} apply" in section


def torchrl_version() -> str:
    import torchrl

    return torchrl.__version__.split("+")[0]
