"""Acrobot: gymnasium's Acrobot-v1, thousands of copies at once.

Examples:
    >>> env = AcrobotEnv(num_envs=3)
    >>> env.observation_spec["observation"].shape, env.action_spec.shape
    (torch.Size([3, 6]), torch.Size([3]))
    >>> td = env.rollout(10)
    >>> td["next", "reward"].shape, td["next", "reward"].max().item() <= 0
    (torch.Size([3, 10, 1]), True)
"""
import math

import numpy as np
from torchrl.data import Categorical

from torchrl_warp.cuda.acrobot import observe_acrobot, reset_acrobot, step_acrobot
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, Layout
from torchrl_warp.params import Param

__all__ = ["AcrobotEnv", "draw_acrobot", "LINK_LENGTH_2"]

#: gymnasium's length of link 2 (m): only its picture reads it
LINK_LENGTH_2 = 1.0


def draw_acrobot(theta1: float, theta2: float, link_length_1: float = 1.0, resolution: int = 500) -> np.ndarray:
    """gymnasium's Acrobot picture, ``resolution`` pixels square (500 by default): the view
    spans ``+-(link_length_1 + LINK_LENGTH_2 + 0.2)``, the black goal line at height 1 above
    the pivot, the links (cyan, 0.2 thick) hanging down at ``theta1 = theta2 = 0``, yellow joints.

    >>> frame = draw_acrobot(0.0, 0.0)
    >>> frame[250 + 57, 250].tolist(), frame[250 - 57, 250].tolist()   # link 1 below the pivot; above: empty
    ([0, 204, 204], [255, 255, 255])
    """
    from torchrl_warp.render import Canvas, check_resolution, rgb

    side = check_resolution(resolution)
    bound = link_length_1 + LINK_LENGTH_2 + 0.2
    canvas = Canvas(side, side, (-bound, bound), (-bound, bound))
    canvas.line((-bound, 1.0), (bound, 1.0), canvas.pixel, rgb(0, 0, 0))
    elbow = np.array([link_length_1 * math.sin(theta1), -link_length_1 * math.cos(theta1)])
    tip = elbow + LINK_LENGTH_2 * np.array([math.sin(theta1 + theta2), -math.cos(theta1 + theta2)])
    for start, end in ((np.zeros(2), elbow), (elbow, tip)):
        canvas.line(start, end, 0.2, rgb(0, 204, 204))
        canvas.disc(start, 0.1, rgb(204, 204, 0))
    return canvas.frame()


class AcrobotEnv(WarpEnv):
    """Two links hanging from a fixed joint, torque on the middle one: gymnasium Acrobot-v1's
    constants, equations (``book_or_nips``) and RK4 integration.

    Observation ``[cos theta1, sin theta1, cos theta2, sin theta2, dtheta1, dtheta2]``
    (float32; ``theta2`` is relative to link 1), action ``Categorical(3)`` (torque -1, 0,
    +1 on the middle joint), reward -1 every step and 0 on the step that reaches the
    height (``-cos(theta1) - cos(theta1 + theta2) > 1``, which terminates), truncated
    after ``max_steps``. Angles are wrapped into ``[-pi, pi]``, velocities bounded by
    ``MAX_VEL_1`` / ``MAX_VEL_2``. Reset: every state variable uniform in ``[-0.1, 0.1)``.
    The state is the field ``kinematics`` (``[num_envs, 1, 4]``: ``theta1, theta2,
    dtheta1, dtheta2``, gymnasium's ``state``). Parameters carry gymnasium's attribute
    names; its ``LINK_LENGTH_2`` is left out (only its rendering reads it). A single-agent
    env: keys sit at the root; one GPU thread per env, many envs per block.
    """

    parameters = {
        "dt": Param(0.2, "seconds per step (one RK4 step)", gt=0),
        "LINK_LENGTH_1": Param(1.0, "length of link 1 (m)", gt=0),
        "LINK_MASS_1": Param(1.0, "mass of link 1 (kg)", gt=0),
        "LINK_MASS_2": Param(1.0, "mass of link 2 (kg)", gt=0),
        "LINK_COM_POS_1": Param(0.5, "position of link 1's centre of mass (m)", ge=0),
        "LINK_COM_POS_2": Param(0.5, "position of link 2's centre of mass (m)", ge=0),
        "LINK_MOI": Param(1.0, "moment of inertia of each link (kg m^2)", gt=0),
        "MAX_VEL_1": Param(4 * math.pi, "dtheta1 is bounded to [-MAX_VEL_1, MAX_VEL_1] (rad/s)", gt=0),
        "MAX_VEL_2": Param(9 * math.pi, "dtheta2 is bounded to [-MAX_VEL_2, MAX_VEL_2] (rad/s)", gt=0),
        "torque_noise_max": Param(0.0, "uniform noise in [-max, max) added to the torque (0: none)", ge=0),
        "book_or_nips": Param("book", "the equations of Sutton and Barto's book, or of the NIPS paper",
                              choices=("book", "nips")),
        "max_steps": Param(500, "truncated after this many steps", ge=1),
    }

    def render(self, mode: str = "rgb_array", env_index: int = 0, resolution: int = 500) -> np.ndarray:
        """An RGB frame ``[resolution, resolution, 3]`` (uint8) of env ``env_index``:
        gymnasium's picture (:func:`draw_acrobot`). Only that env's state is copied to the
        host. Only ``mode="rgb_array"``: there is no window."""
        from torchrl_warp.render import check_render_args

        i = check_render_args(self, mode, env_index, resolution)
        theta1, theta2, _, _ = self.state.get("kinematics")[i, 0].tolist()
        return draw_acrobot(theta1, theta2, self.params.LINK_LENGTH_1, resolution)

    def _layout(self, p):
        return Layout(
            groups=None,
            observation_shape=(6,),
            action_spec=Categorical(3),
            fields=[Field("kinematics", (4,), per_agent=True)],
            reset=(reset_acrobot,),
            observe=(observe_acrobot,),
            step=(step_acrobot,),
            constants={"nips": int(p.book_or_nips == "nips")},
            outputs_from_state=True,
        )
