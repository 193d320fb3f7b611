"""Frames of one env of a batch: ``render(mode="rgb_array")`` of Tag, Tag (gridworld) and the
classic-control envs, and the drawing primitives of torchrl_warp/render.py they share.

Each test writes an env's state fields (docs/environments.md, "Setting a state"), draws
it, and checks that a colour is where that state puts it and nowhere else."""
import math

import numpy as np
import pytest

from conftest import SIM
from torchrl_warp.render import Canvas, rgb

pytestmark = pytest.mark.skipif(SIM, reason="frames are drawn on the host; the CPU backend steps the envs")


def colour_of(colour) -> np.ndarray:
    """A canvas colour (floats in [0, 1]) as the uint8 pixel it is drawn with."""
    return (np.asarray(colour) * 255).round().astype(np.uint8)


def mask(frame, colour) -> np.ndarray:
    """``[H, W]``: where ``frame`` has exactly ``colour``."""
    return (frame == colour_of(colour)).all(-1)


def pixel(x, y, view, resolution):
    """(row, column) of world point ``(x, y)`` in a square frame of ``view x view``."""
    lo, hi = view
    return int((hi - y) / (hi - lo) * resolution), int((x - lo) / (hi - lo) * resolution)


# ----------------------------------------------------------------------------- primitives

def test_canvas_shapes_cover_the_pixels_their_outline_holds():
    red, blue, green = (1.0, 0.0, 0.0), (0.0, 0.0, 1.0), (0.0, 1.0, 0.0)
    canvas = Canvas(20, 10, (0.0, 20.0), (0.0, 10.0))   # one pixel per unit, y up
    canvas.rectangle(2.0, 1.0, 6.0, 3.0, red)           # columns 2..5, rows of y in 1..3
    canvas.line((10.0, 5.0), (18.0, 5.0), 2.0, blue)    # y 4..6
    canvas.polygon([(0.0, 10.0), (4.0, 10.0), (0.0, 6.0)], green)  # the top-left triangle
    frame = canvas.frame()
    assert frame.shape == (10, 20, 3) and frame.dtype == np.uint8
    rows, cols = np.nonzero(mask(frame, red))
    assert set(cols) == {2, 3, 4, 5} and set(10 - 1 - rows) == {1, 2}   # pixel centres at y 1.5, 2.5
    rows, cols = np.nonzero(mask(frame, blue))
    assert set(cols) == set(range(10, 18)) and set(10 - 1 - rows) == {4, 5}
    # y >= x + 6 at the pixel centres (x, y) = (col + 0.5, 9.5 - row): row + col <= 3, the edge included
    assert mask(frame, green).sum() == 10 and mask(frame, green)[3, 0] and not mask(frame, green)[0, 4]
    # a shape outside the view changes nothing, and the last shape drawn is on top
    canvas.disc((100.0, 100.0), 3.0, blue)
    canvas.disc((4.0, 2.0), 0.75, green)   # the 4 pixel centres 0.707 away, red until now
    changed = (canvas.frame() != frame).any(-1)
    assert set(zip(*np.nonzero(changed))) == {(7, 3), (7, 4), (8, 3), (8, 4)}
    assert mask(canvas.frame(), green)[changed].all()
    with pytest.raises(ValueError, match="width"):
        Canvas(0, 10, (0, 1), (0, 1))


def test_rgb_and_the_resolution_check():
    from torchrl_warp.render import check_resolution

    assert rgb(0, 51, 255) == (0.0, 0.2, 1.0)
    for bad in (4, 5000, 400.0, True, "400"):
        with pytest.raises(ValueError, match="resolution must be an int"):
            check_resolution(bad)


# ----------------------------------------------------------------------------- the envs

def small_envs():
    from torchrl_warp.envs import (AcrobotEnv, CartPoleEnv, MountainCarContinuousEnv, MountainCarEnv,
                                   PendulumEnv, TagEnv, TagGridWorldEnv)

    return [TagEnv(num_envs=2, num_taggers=2, num_runners=3, num_other_agents_observed=2, seed=0),
            TagGridWorldEnv(num_envs=2, num_taggers=2, grid_length=4, seed=0),
            CartPoleEnv(num_envs=2, seed=0), AcrobotEnv(num_envs=2, seed=0), PendulumEnv(num_envs=2, seed=0),
            MountainCarEnv(num_envs=2, seed=0), MountainCarContinuousEnv(num_envs=2, seed=0)]


@pytest.fixture(scope="module")
def envs():
    """The envs, never reset nor stepped: their kernels compile on the first launch (seconds
    each on the CPU backend), and rendering reads only the state fields the tests write."""
    return {type(env).__name__: env for env in small_envs()}


def test_every_env_draws_one_env_as_uint8_rgb_and_checks_its_arguments(envs):
    sizes = {"CartPoleEnv": (400, 600), "MountainCarEnv": (400, 600), "MountainCarContinuousEnv": (400, 600),
             "AcrobotEnv": (500, 500), "PendulumEnv": (500, 500), "TagEnv": (400, 400),
             "TagGridWorldEnv": (400, 400)}
    for name, env in envs.items():
        frame = env.render(mode="rgb_array", env_index=1)
        assert frame.shape == sizes[name] + (3,) and frame.dtype == np.uint8, name
        assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 3, name   # a background and shapes
        small = env.render(resolution=90)
        assert small.shape[1] == 90 and small.shape[0] in (60, 90), name
        with pytest.raises(ValueError, match="only mode='rgb_array'"):
            env.render(mode="human")
        with pytest.raises(IndexError, match=r"env_index 2 is outside \[0, 2\)"):
            env.render(env_index=2)
        with pytest.raises(IndexError):
            env.render(env_index=-1)
        with pytest.raises(TypeError, match="env_index must be an int"):
            env.render(env_index=0.5)
        with pytest.raises(ValueError, match="resolution"):
            env.render(resolution=2)


def test_tag_draws_each_agent_where_its_state_puts_it(envs):
    import torch

    from torchrl_warp.envs.tag import TAG_COLORS

    env = envs["TagEnv"]
    side = env.params.grid_length
    r = side / 80
    view = (-2 * r, side + 2 * r)
    # env 1: the taggers at (5, 5) and (15, 5), the runners at (5, 15), (10, 10), (15, 15);
    # all heading +x; env 0 elsewhere
    places = torch.tensor([[5.0, 5.0], [15.0, 5.0], [5.0, 15.0], [10.0, 10.0], [15.0, 15.0]])
    env.state["pos"][1] = places
    env.state["pos"][0] = places.flip(-1) + 0.5
    env.state["direction"].zero_()
    env.state["in_game"].fill_(True)
    env.state["tagged_by"].fill_(-1)
    frame = env.render(env_index=1)
    rows, cols = np.mgrid[:400, :400]
    for kind, agents in (("tagger", [0, 1]), ("runner", [2, 3, 4])):
        found = mask(frame, TAG_COLORS[kind])
        for a in agents:
            x, y = places[a].tolist()
            # behind the heading tick (it points +x from the centre)
            assert found[pixel(x - r / 2, y, view, 400)], (kind, a)
        # and nowhere else: every pixel of the colour is within the disc of one of them
        near = np.zeros_like(found)
        for a in agents:
            row, col = pixel(*places[a].tolist(), view, 400)
            near |= (rows - row) ** 2 + (cols - col) ** 2 <= (r / (view[1] - view[0]) * 400 + 1.5) ** 2
        assert found.any() and not (found & ~near).any(), kind
    assert not mask(frame, TAG_COLORS["tagged"]).any() and not mask(frame, TAG_COLORS["out"]).any()
    assert (env.render(env_index=0) != frame).any()   # env 0 is another picture
    # a runner tagged this step is orange; one out of the game grey
    env.state["tagged_by"][1, 3] = 0
    env.state["in_game"][1, 4] = False
    frame = env.render(env_index=1)
    assert mask(frame, TAG_COLORS["tagged"])[pixel(10 - r / 2, 10, view, 400)]
    assert mask(frame, TAG_COLORS["out"])[pixel(15, 15, view, 400)]
    assert mask(frame, TAG_COLORS["runner"])[pixel(5 - r / 2, 15, view, 400)]
    assert not mask(frame, TAG_COLORS["runner"])[pixel(15, 15, view, 400)]


def test_the_gridworld_colours_the_cells_of_the_taggers_and_the_runner(envs):
    import torch

    from torchrl_warp.envs.tag_gridworld import GRIDWORLD_COLORS

    env = envs["TagGridWorldEnv"]   # 5 x 5 cells of 80 pixels, cell (0, 0) bottom left
    env.state["loc_x"][1] = torch.tensor([1, 1, 3], dtype=torch.int32)   # both taggers on (1, 3)
    env.state["loc_y"][1] = torch.tensor([3, 3, 0], dtype=torch.int32)   # the runner on (3, 0)
    frame = env.render(env_index=1)

    def centre(cx, cy):
        return frame[400 - 1 - (cy * 80 + 40), cx * 80 + 40]

    def cells(colour):
        return {(cx, cy) for cx in range(5) for cy in range(5) if (centre(cx, cy) == colour_of(colour)).all()}

    assert cells(GRIDWORLD_COLORS["tagger"]) == {(1, 3)}
    assert cells(GRIDWORLD_COLORS["runner"]) == {(3, 0)}
    assert len(cells(GRIDWORLD_COLORS["cell"])) == 23
    # a tag: a tagger on the runner's cell shows both, the runner on top
    env.state["loc_x"][1, 0], env.state["loc_y"][1, 0] = 3, 0
    frame = env.render(env_index=1)
    assert cells(GRIDWORLD_COLORS["runner"]) == {(3, 0)} and cells(GRIDWORLD_COLORS["tagger"]) == {(1, 3)}
    corner = frame[400 - 1 - (0 * 80 + 12), 3 * 80 + 12]
    assert (corner == colour_of(GRIDWORLD_COLORS["tagger"])).all()


def test_cartpole_shows_the_cart_position_and_the_pole_angle(envs):
    import torch

    env = envs["CartPoleEnv"]
    pole, cart = rgb(202, 152, 101), rgb(0, 0, 0)
    scale = 600 / (2 * env.params.x_threshold)
    length = scale * 2 * env.params.length   # 125 pixels: gymnasium's picture
    for x, theta in ((0.0, 0.3), (0.0, -0.3), (1.0, 0.0)):
        env.state["kinematics"][1, 0] = torch.tensor([x, 0.0, theta, 0.0])
        frame = env.render(env_index=1)
        axle_x, axle_y = 300 + x * scale, 100 + 7.5
        tip_x, tip_y = axle_x + 0.9 * length * math.sin(theta), axle_y + 0.9 * length * math.cos(theta)
        mirror_x = 2 * axle_x - tip_x
        assert mask(frame, pole)[int(400 - tip_y), int(tip_x)], (x, theta)
        if theta:
            assert not mask(frame, pole)[int(400 - tip_y), int(mirror_x)], (x, theta)
        # the cart spans y 85..115 and x +-25 around its middle (the track is the line y = 100)
        assert mask(frame, cart)[int(400 - 110), int(axle_x + 20)] and not mask(frame, cart)[int(400 - 110),
                                                                                             int(axle_x + 40)]
        cols = np.nonzero(mask(frame, pole).any(0))[0]
        assert (cols.mean() > axle_x + 10) == (theta > 0) and (cols.mean() < axle_x - 10) == (theta < 0)


def test_pendulum_acrobot_and_mountain_car_follow_their_state(envs):
    import torch

    env = envs["PendulumEnv"]   # 500 px over [-2.2, 2.2]: theta = pi / 2 points the rod left
    env.state["kinematics"][0, 0] = torch.tensor([math.pi / 2, 0.0])
    frame = env.render()
    rod = mask(frame, rgb(204, 77, 77))
    assert rod[pixel(-0.7, 0.0, (-2.2, 2.2), 500)] and not rod[pixel(0.7, 0.0, (-2.2, 2.2), 500)]
    assert not rod[pixel(0.0, 0.7, (-2.2, 2.2), 500)]

    env = envs["AcrobotEnv"]    # theta1 = pi / 2: link 1 points right, theta2 = pi / 2 bends link 2 up
    env.state["kinematics"][0, 0] = torch.tensor([math.pi / 2, math.pi / 2, 0.0, 0.0])
    link = mask(env.render(), rgb(0, 204, 204))
    assert link[pixel(0.5, 0.0, (-2.2, 2.2), 500)] and link[pixel(1.0, 0.5, (-2.2, 2.2), 500)]
    assert not link[pixel(-0.5, 0.0, (-2.2, 2.2), 500)] and not link[pixel(0.0, -0.5, (-2.2, 2.2), 500)]

    for name in ("MountainCarEnv", "MountainCarContinuousEnv"):
        env = envs[name]
        p = env.params
        scale = 600 / (p.max_position - p.min_position)
        for position in (-1.0, 0.3):
            env.state["kinematics"][0, 0, 0] = position
            black = mask(env.render(), rgb(0, 0, 0))
            # the body's middle: 10 above the wheels' line, tilted by cos(3 x) as gymnasium's
            tilt = math.cos(3 * position)
            x = (position - p.min_position) * scale - 10 * math.sin(tilt)
            y = 10 + (math.sin(3 * position) * 0.45 + 0.55) * scale + 10 * math.cos(tilt)
            assert black[int(400 - y), int(x)], (name, position)
            assert not black[int(400 - y) - 60, int(x)] and not black[int(400 - y), int(x + 60)], (name, position)
