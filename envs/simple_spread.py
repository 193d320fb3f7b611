"""VMAS's MPE ``simple_spread`` (VMAS 1.5.2): agents spread over as many landmarks.

Examples:
    >>> env = SimpleSpreadEnv(num_envs=2)
    >>> env.observation_spec["agents", "observation"].shape, env.full_action_spec["agents", "action"].shape
    (torch.Size([2, 3, 14]), torch.Size([2, 3, 2]))
"""
import torch
from torchrl.data import Bounded, Categorical

from torchrl_warp.cuda.mpe import collision_force, continuous_action, discrete_action, integrate, integrate_first
from torchrl_warp.cuda.simple_spread import spread_partials, spread_place, spread_reward
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, Layout
from torchrl_warp.params import Param

__all__ = ["SimpleSpreadEnv"]

AGENT_RADIUS = 0.15  # VMAS simple_spread: Sphere(radius=0.15), collide=True
LANDMARK_RADIUS = 0.05  # VMAS's default Sphere, collide=False


class SimpleSpreadEnv(WarpEnv):
    """VMAS ``simple_spread``: ``n_agents`` agents (radius 0.15, colliding) and as many landmarks.

    Group ``"agents"``. Observation (``4 + 2n + 2(n-1)`` floats, VMAS's order): own
    position, own velocity, each landmark's position minus the own, then (with
    ``obs_agents``) each other agent's. Action: ``Bounded(-u_range, u_range, (2,))`` force,
    or with ``continuous_actions=False`` ``Categorical(9)`` (VMAS's flat index of two
    3-way components: x ``a // 3``, y ``a % 3``; 0 stays, 1 is ``-u_range``, 2 ``+u_range``).
    Shared reward: ``-n_agents * sum_l min_a |a - l|`` minus 1 per ordered pair of
    overlapping agents. Never terminated; truncated after ``max_steps``.
    Physics: VMAS's World (drag, soft sphere contacts, semi-implicit Euler substeps).
    """

    parameters = {
        "n_agents": Param(3, "agents, and landmarks", ge=1),
        "obs_agents": Param(True, "observe the other agents' relative positions"),
        "continuous_actions": Param(True, "Bounded 2-d force if True, else Categorical(9)"),
        "max_steps": Param(25, "truncated after this many steps", ge=1),
        "u_range": Param(1.0, "action bound (VMAS Agent.u_range)", gt=0),
        "u_multiplier": Param(1.0, "force per unit of action (VMAS Agent.u_multiplier)", ge=0),
        "dt": Param(0.1, "seconds per step (VMAS World.dt)", gt=0),
        "substeps": Param(1, "physics substeps per step (VMAS World.substeps)", ge=1, le=100),
        "drag": Param(0.25, "velocity lost at each step (VMAS World.drag)", ge=0, le=1),
        "collision_force": Param(100.0, "contact force multiplier (VMAS World.collision_force)", ge=0),
        "contact_margin": Param(1e-3, "softness of contacts (VMAS World.contact_margin)", gt=0),
    }

    def _layout(self, p):
        n = p.n_agents
        entities = 2 * n
        agent = torch.arange(entities) < n
        f64 = torch.float64
        obs = 4 + 2 * n + (2 * (n - 1) if p.obs_agents else 0)
        if p.continuous_actions:
            spec = Bounded(-p.u_range, p.u_range, (2,), dtype=torch.float32)
            act = continuous_action
        else:
            spec = Categorical(9)
            act = discrete_action
        step = [(act, collision_force), integrate_first]
        for _ in range(p.substeps - 1):
            step += [collision_force, integrate]
        step += [spread_partials, spread_reward]
        return Layout(
            groups={"agents": n},
            observation_shape=(obs,),
            action_spec=spec,
            fields=[
                Field("pos", (entities, 2)),
                Field("vel", (entities, 2)),
                Field("u", (2,), per_agent=True),
                Field("force", (2,), per_agent=True, scratch=True),
                Field("reward_part", (), torch.float64, per_agent=True, scratch=True),
            ],
            reset=(spread_place, spread_partials),
            step=tuple(step),
            constants={
                "entity_size": torch.where(agent, AGENT_RADIUS, LANDMARK_RADIUS).to(f64),
                "entity_collide": agent.to(f64),
                "entity_movable": agent.to(f64),
                "entity_mass": torch.ones(entities, dtype=f64),
                "entity_max_speed": torch.zeros(entities, dtype=f64),
                "agent_u_multiplier": torch.full((n,), p.u_multiplier, dtype=f64),
                "collision_force_multiplier": p.collision_force,
                "sub_dt": p.dt / p.substeps,
            },
        )
