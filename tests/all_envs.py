"""Every environment of the package at test sizes: the tests that every env must pass
(outputs that are the caller's, refusals that change nothing, the soak) run over these.

A new environment adds its entries here.
"""
from group_envs import MoversEnv, SpeakersEnv
from torchrl_warp.envs import AcrobotEnv, CartPoleEnv, MountainCarContinuousEnv, MountainCarEnv, PendulumEnv, \
    SimpleSpreadEnv, TagEnv, TagGridWorldEnv
from torchrl_warp.envs.simple import SimpleEnv
from torchrl_warp.envs.simple_adversary import SimpleAdversaryEnv
from torchrl_warp.envs.simple_crypto import SimpleCryptoEnv
from torchrl_warp.envs.simple_push import SimplePushEnv
from torchrl_warp.envs.simple_reference import SimpleReferenceEnv
from torchrl_warp.envs.simple_speaker_listener import SimpleSpeakerListenerEnv
from torchrl_warp.envs.simple_tag import SimpleTagEnv
from torchrl_warp.envs.simple_world_comm import SimpleWorldCommEnv

#: name -> (class, constructor kwargs), tiny enough for the CUDA simulator
ENVS = {
    "cartpole": (CartPoleEnv, dict(num_envs=3)),
    "acrobot": (AcrobotEnv, dict(num_envs=3, max_steps=8)),
    "acrobot_nips_noisy": (AcrobotEnv, dict(num_envs=2, book_or_nips="nips", torque_noise_max=0.2, max_steps=8)),
    "mountain_car": (MountainCarEnv, dict(num_envs=3, max_steps=8)),
    "mountain_car_continuous": (MountainCarContinuousEnv, dict(num_envs=3, max_steps=8)),
    "pendulum": (PendulumEnv, dict(num_envs=3, max_steps=8)),
    "tag_scan": (TagEnv, dict(num_envs=2, num_taggers=2, num_runners=3, num_other_agents_observed=2,
                              neighbor_search="scan", episode_length=8)),
    "tag_grid": (TagEnv, dict(num_envs=2, num_taggers=2, num_runners=4, num_other_agents_observed=3,
                              neighbor_search="grid", episode_length=8)),
    "tag_full": (TagEnv, dict(num_envs=2, num_taggers=1, num_runners=3, use_full_observation=True,
                              egocentric_observation=True, episode_length=8)),
    "tag_gridworld": (TagGridWorldEnv, dict(num_envs=3, num_taggers=3, grid_length=5, episode_length=8,
                                            starting_locations="random")),
    "tag_gridworld_partial": (TagGridWorldEnv, dict(num_envs=2, num_taggers=2, grid_length=3, episode_length=8,
                                                    use_full_observation=False)),
    "simple_spread": (SimpleSpreadEnv, dict(num_envs=3, max_steps=6)),
    "simple_spread_discrete": (SimpleSpreadEnv, dict(num_envs=2, n_agents=4, continuous_actions=False,
                                                     substeps=2, max_steps=6)),
    "simple": (SimpleEnv, dict(num_envs=3, max_steps=6)),
    "simple_discrete": (SimpleEnv, dict(num_envs=2, continuous_actions=False, max_steps=6)),
    "simple_adversary": (SimpleAdversaryEnv, dict(num_envs=3, max_steps=6)),
    "simple_adversary_discrete": (SimpleAdversaryEnv, dict(num_envs=2, n_agents=4, n_adversaries=2,
                                                           continuous_actions=False, max_steps=6)),
    "simple_push": (SimplePushEnv, dict(num_envs=3, max_steps=6)),
    "simple_push_discrete": (SimplePushEnv, dict(num_envs=2, continuous_actions=False, substeps=2, max_steps=6)),
    "simple_speaker_listener": (SimpleSpeakerListenerEnv, dict(num_envs=3, max_steps=6)),
    "simple_speaker_listener_one_hot": (SimpleSpeakerListenerEnv, dict(num_envs=2, continuous_actions=False,
                                                                        categorical_actions=False, max_steps=6)),
    "simple_reference": (SimpleReferenceEnv, dict(num_envs=2, continuous_actions=False, max_steps=6)),
    "simple_crypto": (SimpleCryptoEnv, dict(num_envs=3, max_steps=6)),
    "simple_crypto_multidiscrete": (SimpleCryptoEnv, dict(num_envs=2, dim_c=3, continuous_actions=False,
                                                          multidiscrete_actions=True, max_steps=6)),
    "simple_tag": (SimpleTagEnv, dict(num_envs=3, max_steps=6)),
    "simple_tag_discrete": (SimpleTagEnv, dict(num_envs=2, num_adversaries=2, num_good_agents=2, num_landmarks=1,
                                               continuous_actions=False, respawn_at_catch=True, max_steps=6)),
    "simple_world_comm": (SimpleWorldCommEnv, dict(num_envs=2, max_steps=6)),
    "simple_world_comm_discrete": (SimpleWorldCommEnv, dict(num_envs=3, num_good_agents=1, num_adversaries=2,
                                                            num_forests=1, continuous_actions=False, max_steps=6)),
    # groups that differ (tests/group_envs.py): discrete, and continuous
    "speakers": (SpeakersEnv, dict(num_envs=2)),
    "movers": (MoversEnv, dict(num_envs=2)),
}

#: the package's env classes (for checks on their declarations and docs)
ENV_CLASSES = [CartPoleEnv, AcrobotEnv, MountainCarEnv, MountainCarContinuousEnv, PendulumEnv, TagEnv, SimpleEnv,
               TagGridWorldEnv, SimpleAdversaryEnv, SimpleCryptoEnv, SimplePushEnv,
               SimpleReferenceEnv, SimpleSpeakerListenerEnv, SimpleSpreadEnv, SimpleTagEnv, SimpleWorldCommEnv]


def make(name, **overrides):
    cls, kwargs = ENVS[name]
    return cls(**{**kwargs, **overrides})
