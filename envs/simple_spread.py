"""VMAS's MPE ``simple_spread`` (VMAS 1.5.2): agents spread over as many landmarks.

Examples:
    >>> env = SimpleSpreadEnv(num_envs=2)
    >>> env.observation_spec["agents", "observation"].shape, env.full_action_spec["agents", "action"].shape
    (torch.Size([2, 3, 14]), torch.Size([2, 3, 2]))
"""
import torch

from torchrl_warp.cuda.simple_spread import spread_partials, spread_place, spread_reward
from torchrl_warp.envs.mpe import COLORS, SCENARIOS, Agent, Landmark, MPEScenario, ScenarioKernels, common_parameters
from torchrl_warp.layout import Field
from torchrl_warp.params import Param

__all__ = ["SimpleSpreadEnv"]


class SimpleSpreadEnv(MPEScenario):
    """VMAS ``simple_spread``: ``n_agents`` agents (radius 0.15, colliding) and as many landmarks.

    Group ``"agents"``. Observation (``4 + 2n + 2(n-1)`` floats, VMAS's order): own
    position, own velocity, each landmark's position minus the own, then (with
    ``obs_agents``) each other agent's. Action: a 2-d force in ``[-1, 1]``, or one of 9
    (VMAS's flat index of two 3-way components). Shared reward: ``-n_agents * sum_l
    min_a |a - l|`` minus 1 per ordered pair of overlapping agents. Never terminates;
    the episode ends after ``max_steps``.
    """

    scenario = "simple_spread"
    parameters = {
        "n_agents": Param(3, "agents, and landmarks", ge=1),
        "obs_agents": Param(True, "observe the other agents' relative positions"),
        **common_parameters(),
    }

    def _agents(self, p):
        size = 4 + 2 * p.n_agents + (2 * (p.n_agents - 1) if p.obs_agents else 0)
        return [Agent(f"agent_{i}", radius=0.15, observation_size=size, color=COLORS["blue"])
                for i in range(p.n_agents)]

    def _landmarks(self, p):
        return [Landmark(f"landmark {i}", collide=False, color=COLORS["black"]) for i in range(p.n_agents)]

    def _kernels(self, p):
        return ScenarioKernels(
            reset=(spread_place,), observe=(spread_partials,),
            step=(spread_partials, spread_reward),
            fields=[Field("reward_part", (), torch.float64, per_agent=True, scratch=True)],
        )


SCENARIOS["simple_spread"] = SimpleSpreadEnv


class GoToLandmark:
    """A scripted ``simple_spread`` policy (VMAS keeps such heuristics beside its scenarios):
    agent ``i`` heads straight for landmark ``i`` at full force.

    A TorchRL policy: called on a TensorDict, it writes ``(group, "action")`` for every
    group of ``env`` and returns it. It reads the positions from ``env.state["pos"]``
    (the agents first, then the landmarks), so it is a yardstick, not a learner.
    Continuous actions: the unit vector towards the landmark times ``u_range`` (message
    dims, if any, 0). Discrete actions: on each axis, the full force towards the
    landmark (``0`` when level with it), encoded as the env's action spec wants it
    (categorical flat index, multi-categorical components, or their one-hot rows).

    Examples:
        >>> env = SimpleSpreadEnv(num_envs=2, seed=0)
        >>> td = env.rollout(3, GoToLandmark(env), break_when_any_done=False)
        >>> td["agents", "action"].shape, bool((td["agents", "action"].norm(dim=-1) - 1).abs().max() < 1e-5)
        (torch.Size([2, 3, 3, 2]), True)
        >>> env = SimpleSpreadEnv(num_envs=2, seed=0, continuous_actions=False)
        >>> GoToLandmark(env)(env.reset())["agents", "action"].dtype
        torch.int64
    """

    def __init__(self, env):
        if len(env.landmarks) < env.n_agents:
            raise ValueError(f"GoToLandmark: {env.n_agents} agents but {len(env.landmarks)} landmarks")
        self.env = env
        self.slices = env.layout.group_slices()
        self.specs = {g: env.full_action_spec[g, "action"] for g in self.slices}
        self.u_range = torch.tensor([a.u_range for a in env.agents], device=env.device)

    def __call__(self, tensordict):
        pos = self.env.state["pos"]
        n = self.env.n_agents
        delta = pos[:, n:2 * n] - pos[:, :n]  # [E, n, 2]: agent i -> landmark i
        for group, rows in self.slices.items():
            tensordict.set((group, "action"), self._encode(delta[:, rows], self.u_range[rows], self.specs[group]))
        return tensordict

    @staticmethod
    def _encode(delta, u_range, spec):
        from torchrl.data import Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot

        if isinstance(spec, Bounded):
            norm = delta.norm(dim=-1, keepdim=True)
            u = torch.where(norm > 0, delta / norm.clamp_min(1e-12), torch.zeros_like(delta)) * u_range[:, None]
            pad = spec.shape[-1] - 2  # messages: silent
            action = torch.cat([u, u.new_zeros(*u.shape[:-1], pad)], -1) if pad else u
            return action.to(spec.dtype)
        # per axis: 0 stays, 1 pushes to -u_range, 2 to +u_range (VMAS's discrete components)
        sign = torch.sign(delta).long()
        x, y = [torch.where(s > 0, 2, torch.where(s < 0, 1, 0)) for s in sign.unbind(-1)]
        if isinstance(spec, MultiCategorical):  # (a Categorical too: asked first)
            parts = [x, y] + [torch.zeros_like(x)] * (spec.shape[-1] - 2)
            return torch.stack(parts, -1).to(spec.dtype)
        if isinstance(spec, Categorical):
            per_message = spec.space.n // 9
            return ((x * 3 + y) * per_message).to(spec.dtype)
        if isinstance(spec, MultiOneHot):  # (a OneHot too: asked first)
            parts = [torch.nn.functional.one_hot(x, 3), torch.nn.functional.one_hot(y, 3)]
            parts += [torch.nn.functional.one_hot(torch.zeros_like(x), int(s)) for s in spec.nvec[2:]]
            return torch.cat(parts, -1).to(spec.dtype)
        if isinstance(spec, OneHot):
            per_message = spec.space.n // 9
            return torch.nn.functional.one_hot((x * 3 + y) * per_message, spec.space.n).to(spec.dtype)
        raise TypeError(f"GoToLandmark: unsupported action spec {type(spec).__name__}")


__all__ += ["GoToLandmark"]
