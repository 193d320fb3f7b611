"""VMAS's MPE ``simple_tag`` (VMAS 1.5.2): adversaries chase good agents among obstacles.

Examples:
    >>> env = SimpleTagEnv(num_envs=2)
    >>> env.group_map
    {'adversary': ['adversary_0', 'adversary_1', 'adversary_2'], 'agent': ['agent_0']}
    >>> env.observation_spec["adversary", "observation"].shape, env.observation_spec["agent", "observation"].shape
    (torch.Size([2, 3, 16]), torch.Size([2, 1, 14]))
    >>> env.rollout(3)["next", "adversary", "reward"].shape
    torch.Size([2, 3, 3, 1])
"""
import torch

from torchrl_warp.cuda.simple_tag import tag_commit, tag_observe, tag_place, tag_reward, tag_reward_part
from torchrl_warp.envs.mpe import COLORS, SCENARIOS, Agent, Landmark, MPEScenario, ScenarioKernels, World, \
    common_parameters
from torchrl_warp.layout import Field
from torchrl_warp.params import Param

__all__ = ["SimpleTagEnv"]


class SimpleTagEnv(MPEScenario):
    """VMAS ``simple_tag``: ``num_adversaries`` red adversaries (``adversary_<i>``, radius
    0.075, force multiplier 3, top speed 1.0) chase ``num_good_agents`` faster green good
    agents (``agent_<i>``, radius 0.05, multiplier 4, top speed 1.3) among
    ``num_landmarks`` black obstacles (radius 0.2, fixed, colliding). Every agent collides
    with every agent and obstacle (10 substeps per step, contact force 500); positions are
    clamped to ``[-bound, bound]^2``.

    Groups ``"adversary"`` (agents ``0..A-1``) and ``"agent"`` (the good agents).
    Observation (VMAS's order): own velocity (``observe_vel``), own position
    (``observe_pos``), each obstacle's position minus the own, the observed other agents'
    positions minus the own (in agent order), then the observed other good agents'
    velocities. An adversary observes every good agent, and the other adversaries'
    positions with ``observe_same_team``; a good agent every adversary's position, and the
    other good agents' positions and velocities with ``observe_same_team``. Defaults: 16
    floats for an adversary, 14 for a good agent. Action: a 2-d force in ``[-1, 1]`` (times
    the multiplier), or one of 9 (VMAS's flat index of two 3-way components).

    Reward: an adversary gets ``+10`` per good agent it touches (spheres overlapping), a
    good agent ``-10`` per adversary touching it; ``shape_adversary_rew`` subtracts 0.1 times
    an adversary's distance to the nearest good agent, ``shape_agent_rew`` adds 0.1 times
    the sum of a good agent's distances to the adversaries. ``adversaries_share_rew``
    (default) gives every adversary the adversaries' sum, ``agents_share_rew`` every good
    agent the good agents' sum. With ``respawn_at_catch``, after the rewards, a good agent
    touched by an adversary (checked adversary by adversary, from where it is then) moves
    to a new uniform position in ``[-bound, bound]^2`` at rest (our counter RNG, not
    VMAS's draws). Reset: agents uniform in ``[-bound, bound]^2``, obstacles in
    ``[-(bound - 0.1), bound - 0.1]^2``. Never terminates; the episode ends after
    ``max_steps``.

    Any number of agents: every loop over other entities runs in one agent's lane
    (O(agents + obstacles) per agent; the benchmark runs 10 + 100). Scratch state:
    ``reward_part`` (each agent's own reward), ``spawn_pos``/``spawn_vel`` (where good agents
    respawn).
    """

    scenario = "simple_tag"
    parameters = {
        "num_good_agents": Param(1, "good agents (group 'agent'), the prey", ge=1),
        "num_adversaries": Param(3, "adversaries (group 'adversary'), the chasers", ge=1),
        "num_landmarks": Param(2, "obstacles (radius 0.2, colliding)", ge=0),
        "shape_agent_rew": Param(False, "good agents also get 0.1 x their summed distance to the adversaries"),
        "shape_adversary_rew": Param(False, "adversaries also lose 0.1 x their distance to the nearest good agent"),
        "agents_share_rew": Param(False, "every good agent gets the good agents' summed reward"),
        "adversaries_share_rew": Param(True, "every adversary gets the adversaries' summed reward"),
        "observe_same_team": Param(True, "agents observe their own team's other members too"),
        "observe_pos": Param(True, "agents observe their own position"),
        "observe_vel": Param(True, "agents observe their own velocity"),
        "bound": Param(1.0, "world half-width: positions clamped to [-bound, bound]", ge=0.1),
        "respawn_at_catch": Param(False, "a caught good agent moves to a random position, at rest"),
        **common_parameters(substeps=10, collision_force=500.0),
    }

    def _observation_sizes(self, p):
        """(adversary's, good agent's) observation sizes."""
        own = 2 * int(p.observe_vel) + 2 * int(p.observe_pos) + 2 * p.num_landmarks
        a, g, same = p.num_adversaries, p.num_good_agents, int(p.observe_same_team)
        return own + 2 * (g + same * (a - 1)) + 2 * g, own + 2 * (a + same * (g - 1)) + 2 * same * (g - 1)

    def _agents(self, p):
        adversary_size, good_size = self._observation_sizes(p)
        adversaries = [Agent(f"adversary_{i}", radius=0.075, u_multiplier=3.0, max_speed=1.0,
                             observation_size=adversary_size, color=COLORS["red"])
                       for i in range(p.num_adversaries)]
        good = [Agent(f"agent_{i}", radius=0.05, u_multiplier=4.0, max_speed=1.3, observation_size=good_size,
                      color=COLORS["green"]) for i in range(p.num_good_agents)]
        return adversaries + good

    def _landmarks(self, p):
        return [Landmark(f"landmark {i}", radius=0.2, color=COLORS["black"]) for i in range(p.num_landmarks)]

    def _world(self, p):
        return World(x_semidim=p.bound, y_semidim=p.bound)

    def _kernels(self, p):
        # respawn_at_catch or not, the same kernels (a runtime flag; see cuda/simple_tag.py)
        return ScenarioKernels(
            reset=(tag_place,), observe=(tag_observe,),
            step=(tag_reward_part, (tag_reward, tag_observe, tag_commit)),
            fields=[Field("reward_part", (), torch.float64, per_agent=True, scratch=True),
                    Field("spawn_pos", (2,), per_agent=True, scratch=True),
                    Field("spawn_vel", (2,), per_agent=True, scratch=True)],
        )


SCENARIOS["simple_tag"] = SimpleTagEnv
