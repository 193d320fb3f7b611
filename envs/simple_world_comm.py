"""VMAS's MPE ``simple_world_comm`` (VMAS 1.5.2): a talking leader and its adversaries hunt
good agents that forage, among obstacles and forests, in a bounded world.

Examples:
    >>> env = SimpleWorldCommEnv(num_envs=2)
    >>> list(env.group_map), env.group_map["adversary"]
    (['lead_adversary', 'adversary', 'agent'], ['adversary_1', 'adversary_2', 'adversary_3'])
    >>> [env.observation_spec[g, "observation"].shape[-1] for g in env.group_map]
    [60, 60, 56]
    >>> env.full_action_spec["lead_adversary", "action"].shape  # force, and a 4-d message
    torch.Size([2, 1, 6])
"""
import torch

from torchrl_warp.cuda.simple_world_comm import (world_comm_adversary_reward, world_comm_good_reward,
                                                 world_comm_observe, world_comm_place)
from torchrl_warp.envs.mpe import SCENARIOS, Agent, Landmark, MPEScenario, ScenarioKernels, World, common_parameters
from torchrl_warp.layout import Field
from torchrl_warp.params import Param

__all__ = ["SimpleWorldCommEnv"]

#: VMAS's message size for this scenario (its World's ``dim_c``)
DIM_C = 4
#: the colours VMAS's reset gives (leader: the adversaries' minus 0.3)
GOOD_COLOR, ADVERSARY_COLOR, LEADER_COLOR = (0.45, 0.95, 0.45), (0.95, 0.45, 0.45), (0.65, 0.15, 0.15)
OBSTACLE_COLOR, FOOD_COLOR, FOREST_COLOR = (0.25, 0.25, 0.25), (0.15, 0.15, 0.65), (0.6, 0.9, 0.6)


class SimpleWorldCommEnv(MPEScenario):
    """VMAS ``simple_world_comm``: ``num_adversaries`` adversaries (radius 0.075, force
    multiplier 3, top speed 1.0), the first of them the leader ``lead_adversary_0``, the
    others ``adversary_<i>`` (``i`` from 1); ``num_good_agents`` good agents ``agent_<i>``
    (radius 0.045, multiplier 4, top speed 1.3); ``num_landmarks`` obstacles (radius 0.2,
    colliding, fixed), ``num_food`` food (radius 0.03) and ``num_forests`` forests (radius
    0.3), neither colliding. The world is bounded to ``[-1, 1]^2`` (positions clamped).

    Groups (VmasEnv's): ``"lead_adversary"``, ``"adversary"``, ``"agent"``. The leader
    alone talks: its action adds a 4-d message in ``[0, 1]`` (discrete: one of 4), which
    every adversary observes. Observation, VMAS's order: own velocity, own position, each
    landmark (obstacles, food, forests) minus the own position; then, for each other agent
    and each forest, that agent's position minus the own; then, for each other agent and
    each forest, its velocity; then ``-1`` per forest; adversaries and the leader add the
    leader's message. ``4 + 2 (L + F + T) + 4 (n - 1) T + T`` floats, plus 4 for the
    adversaries.

    What VMAS 1.5.2 does that its names do not say: its forest flags are written into
    copies of the tensors (``in_forest[index][:, i] = 1``), so nothing is ever in a forest:
    the flags are always ``-1``, the leader always sees every other agent (positions, and
    good agents' velocities), and the other agents see zeros in those slots. Its
    adversaries' distance shaping is ``0.1 * |a - a|`` (zero), and its bound penalty is
    commented out. Rewards: each adversary gets ``+5`` per (good agent, adversary) pair in
    contact (shared by all adversaries); a good agent ``-5`` per adversary touching it,
    ``+2`` per food it touches, minus ``0.05 *`` the distance to the nearest food. Never
    terminates; the episode ends after ``max_steps``.

    ``num_adversaries=0`` is VMAS's too: agent 0 is then a good agent that is still the
    talking leader named ``lead_adversary_0``, observing everyone and its own message.
    """

    scenario = "simple_world_comm"
    parameters = {
        "num_good_agents": Param(2, "good agents (group 'agent'), the prey", ge=1),
        "num_adversaries": Param(4, "adversaries, the first the talking leader (group 'lead_adversary'), the "
                                    "others group 'adversary'", ge=0),
        "num_landmarks": Param(1, "obstacles (radius 0.2, colliding)", ge=0),
        "num_food": Param(2, "food (radius 0.03), which good agents are rewarded to touch", ge=1),
        "num_forests": Param(2, "forests (radius 0.3)", ge=1),
        **common_parameters(),
    }

    def _agents(self, p):
        n = p.num_good_agents + p.num_adversaries
        m = p.num_landmarks + p.num_food + p.num_forests
        size = 4 + 2 * m + 4 * (n - 1) * p.num_forests + p.num_forests
        agents = []
        for i in range(n):
            adversary, leader = i < p.num_adversaries, i == 0
            name = "lead_adversary_0" if leader else (f"adversary_{i}" if adversary else
                                                      f"agent_{i - p.num_adversaries}")
            color = (LEADER_COLOR if adversary else tuple(c - 0.3 for c in GOOD_COLOR)) if leader else \
                (ADVERSARY_COLOR if adversary else GOOD_COLOR)
            agents.append(Agent(name, radius=0.075 if adversary else 0.045, u_multiplier=3.0 if adversary else 4.0,
                                max_speed=1.0 if adversary else 1.3, silent=not leader, color=color,
                                observation_size=size + (DIM_C if adversary or leader else 0)))
        return agents

    def _landmarks(self, p):
        return ([Landmark(f"landmark {i}", radius=0.2, color=OBSTACLE_COLOR) for i in range(p.num_landmarks)]
                + [Landmark(f"food {i}", radius=0.03, collide=False, color=FOOD_COLOR) for i in range(p.num_food)]
                + [Landmark(f"forest {i}", radius=0.3, collide=False, color=FOREST_COLOR)
                   for i in range(p.num_forests)])

    def _world(self, p):
        return World(dim_c=DIM_C, x_semidim=1.0, y_semidim=1.0)

    def _kernels(self, p):
        return ScenarioKernels(
            reset=(world_comm_place,), observe=(world_comm_observe,),
            step=((world_comm_observe, world_comm_good_reward), world_comm_adversary_reward),
            fields=[Field("caught", (), torch.int32, per_agent=True, scratch=True)],
        )


SCENARIOS["simple_world_comm"] = SimpleWorldCommEnv
