"""VMAS's MPE ``simple`` (VMAS 1.5.2): one agent moves to one landmark.

Examples:
    >>> env = SimpleEnv(num_envs=2)
    >>> env.group_map
    {'agents': ['agent_0']}
    >>> env.observation_spec["agents", "observation"].shape, env.full_action_spec["agents", "action"].shape
    (torch.Size([2, 1, 4]), torch.Size([2, 1, 2]))
    >>> env.rollout(3)["next", "agents", "reward"].shape
    torch.Size([2, 3, 1, 1])
"""
from torchrl_warp.cuda.simple import simple_observe, simple_place, simple_reward
from torchrl_warp.envs.mpe import COLORS, SCENARIOS, Agent, Landmark, MPEScenario, ScenarioKernels, common_parameters

__all__ = ["SimpleEnv"]


class SimpleEnv(MPEScenario):
    """VMAS ``simple``: one agent (``agent_0``, radius 0.05) and one landmark (radius 0.05);
    nothing collides, the world is unbounded.

    Group ``"agents"`` (VmasEnv's name for a lone ``agent_<i>`` group). Observation (4
    floats): own velocity, then the landmark's position minus the own. Action: a 2-d force
    in ``[-1, 1]``, or one of 9 (VMAS's flat index of two 3-way components). Reward: minus
    the *squared* distance to the landmark. Never terminates; the episode ends after
    ``max_steps``. Reset: agent and landmark uniform in ``[-1, 1)^2``, at rest.
    """

    scenario = "simple"
    parameters = common_parameters()

    def _agents(self, p):
        return [Agent("agent_0", collide=False, observation_size=4, color=COLORS["gray"])]

    def _landmarks(self, p):
        return [Landmark("landmark 0", collide=False, color=COLORS["red"])]

    def _kernels(self, p):
        return ScenarioKernels(reset=(simple_place,), observe=(simple_observe,), step=((simple_observe, simple_reward),))


SCENARIOS["simple"] = SimpleEnv
