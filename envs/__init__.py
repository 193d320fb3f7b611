"""torchrl-warp's environments (installed as ``torchrl_warp.envs``)."""
from torchrl_warp.envs.acrobot import AcrobotEnv
from torchrl_warp.envs.cartpole import CartPoleEnv
from torchrl_warp.envs.mountain_car import MountainCarEnv
from torchrl_warp.envs.mountain_car_continuous import MountainCarContinuousEnv
from torchrl_warp.envs.mpe import MPEEnv
from torchrl_warp.envs.pendulum import PendulumEnv
from torchrl_warp.envs.simple import SimpleEnv
from torchrl_warp.envs.simple_adversary import SimpleAdversaryEnv
from torchrl_warp.envs.simple_crypto import SimpleCryptoEnv
from torchrl_warp.envs.simple_push import SimplePushEnv
from torchrl_warp.envs.simple_reference import SimpleReferenceEnv
from torchrl_warp.envs.simple_speaker_listener import SimpleSpeakerListenerEnv
from torchrl_warp.envs.simple_spread import SimpleSpreadEnv
from torchrl_warp.envs.simple_tag import SimpleTagEnv
from torchrl_warp.envs.simple_world_comm import SimpleWorldCommEnv
from torchrl_warp.envs.tag import TagEnv
from torchrl_warp.envs.tag_gridworld import TagGridWorldEnv

__all__ = ["TagEnv", "TagGridWorldEnv", "CartPoleEnv", "AcrobotEnv", "MountainCarEnv", "MountainCarContinuousEnv",
           "PendulumEnv", "MPEEnv", "SimpleEnv", "SimpleAdversaryEnv", "SimpleCryptoEnv", "SimplePushEnv",
           "SimpleReferenceEnv", "SimpleSpeakerListenerEnv", "SimpleSpreadEnv", "SimpleTagEnv", "SimpleWorldCommEnv"]
