"""Frames of an environment drawn with numpy alone: no display, no extra dependency.

A :class:`Canvas` is a float RGB frame of a rectangle of the world (``y`` up); its
primitives (:meth:`~Canvas.disc`, :meth:`~Canvas.rectangle`, :meth:`~Canvas.polygon`,
:meth:`~Canvas.line`, :meth:`~Canvas.polyline`) fill the pixels whose centres they cover,
in the order they are called (later shapes on top), each looking only at the pixels of
its own bounding box. :meth:`~Canvas.frame` is the uint8 ``[height, width, 3]`` picture an
env's ``render(mode="rgb_array")`` returns. :func:`check_render_args` is the argument
check every env's ``render`` shares.

Examples:
    >>> import numpy as np
    >>> frame = draw_discs(np.array([[0.0, 0.0]]), np.array([0.5]), [(1.0, 0.0, 0.0)], extent=1.0, resolution=8)
    >>> frame.shape, frame.dtype, frame[4, 4].tolist()
    ((8, 8, 3), dtype('uint8'), [255, 0, 0])
    >>> canvas = Canvas(4, 2, (0.0, 4.0), (0.0, 2.0))   # one pixel per world unit
    >>> canvas.rectangle(1.0, 0.0, 2.0, 1.0, (0.0, 0.0, 1.0))
    >>> canvas.frame()[:, :, 0].tolist()  # red: 0 where the blue rectangle is (bottom row, second pixel)
    [[255, 255, 255, 255], [255, 0, 255, 255]]
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["Canvas", "check_render_args", "check_resolution", "draw_discs", "rgb"]


def rgb(*values: int) -> tuple[float, float, float]:
    """A colour given in 0-255 as the floats in [0, 1] the canvas takes.

    >>> rgb(255, 0, 51)
    (1.0, 0.0, 0.2)
    """
    return tuple(v / 255 for v in values)


def check_resolution(resolution) -> int:
    """``resolution`` if it is an int in [8, 4096], else ``ValueError``."""
    if isinstance(resolution, bool) or not isinstance(resolution, numbers.Integral) or not 8 <= resolution <= 4096:
        raise ValueError(f"resolution must be an int in [8, 4096], got {resolution!r}")
    return int(resolution)


def check_render_args(env, mode, env_index, resolution) -> int:
    """What every env's ``render`` checks: ``mode`` is ``"rgb_array"`` (there is no window),
    ``env_index`` an int in ``[0, num_envs)``, ``resolution`` an int in [8, 4096]. Returns
    ``env_index`` as an int.

    >>> from types import SimpleNamespace
    >>> check_render_args(SimpleNamespace(num_envs=2), "rgb_array", 2, 400)
    Traceback (most recent call last):
    ...
    IndexError: env_index 2 is outside [0, 2)
    """
    name = type(env).__name__
    if mode != "rgb_array":
        raise ValueError(f"{name}.render: only mode='rgb_array' is supported (no display), got {mode!r}")
    if isinstance(env_index, bool) or not isinstance(env_index, numbers.Integral):
        raise TypeError(f"{name}.render: env_index must be an int, got {env_index!r}")
    if not 0 <= env_index < env.num_envs:
        raise IndexError(f"env_index {env_index} is outside [0, {env.num_envs})")
    check_resolution(resolution)
    return int(env_index)


def _centres(n: int, lo: float, hi: float) -> np.ndarray:
    """The world coordinates of ``n`` pixel centres spanning ``[lo, hi]``."""
    return (np.arange(n) + 0.5) / n * (hi - lo) + lo


class Canvas:
    """A ``width x height`` RGB frame (floats in [0, 1]) of the world rectangle
    ``x_range x y_range``, ``y`` up (row 0 is the top: ``y_range[1]``)."""

    def __init__(self, width: int, height: int, x_range, y_range, background=(1.0, 1.0, 1.0)):
        for name, n in (("width", width), ("height", height)):
            if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= 8192:
                raise ValueError(f"Canvas: {name} must be an int in [1, 8192], got {n!r}")
        (x0, x1), (y0, y1) = (map(float, x_range)), (map(float, y_range))
        if not (x0 < x1 and y0 < y1):
            raise ValueError(f"Canvas: empty world rectangle {x_range!r} x {y_range!r}")
        self.width, self.height = int(width), int(height)
        self.x_range, self.y_range = (x0, x1), (y0, y1)
        self.xs = _centres(self.width, x0, x1)             # column -> x
        self.ys = _centres(self.height, y0, y1)[::-1]      # row -> y (the top row is the highest)
        #: the world size of a pixel (the larger side): the thinnest line that always shows
        self.pixel = max((x1 - x0) / self.width, (y1 - y0) / self.height)
        self.image = np.empty((self.height, self.width, 3))
        self.image[:] = background

    def _window(self, bx0: float, bx1: float, by0: float, by1: float):
        """The rows and columns whose centres may lie in ``[bx0, bx1] x [by0, by1]`` and
        their coordinates (``x`` ``[1, w]``, ``y`` ``[h, 1]``), or None when none do."""
        (x0, x1), (y0, y1) = self.x_range, self.y_range
        dx, dy = (x1 - x0) / self.width, (y1 - y0) / self.height
        c0 = max(int(np.floor((bx0 - x0) / dx)) - 1, 0)
        c1 = min(int(np.ceil((bx1 - x0) / dx)) + 1, self.width)
        r0 = max(int(np.floor((y1 - by1) / dy)) - 1, 0)
        r1 = min(int(np.ceil((y1 - by0) / dy)) + 1, self.height)
        if c0 >= c1 or r0 >= r1:
            return None
        return (slice(r0, r1), slice(c0, c1)), self.xs[None, c0:c1], self.ys[r0:r1, None]

    def _fill(self, window, mask, colour) -> None:
        self.image[window][mask] = colour

    def disc(self, centre, radius: float, colour) -> None:
        """The pixels within ``radius`` of ``centre``."""
        cx, cy = float(centre[0]), float(centre[1])
        r = float(radius)
        found = self._window(cx - r, cx + r, cy - r, cy + r)
        if found is not None:
            window, x, y = found
            self._fill(window, (x - cx) ** 2 + (y - cy) ** 2 <= r * r, colour)

    def rectangle(self, x0: float, y0: float, x1: float, y1: float, colour) -> None:
        """The axis-aligned rectangle ``[x0, x1] x [y0, y1]``."""
        found = self._window(x0, x1, y0, y1)
        if found is not None:
            window, x, y = found
            self._fill(window, (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1), colour)

    def polygon(self, points, colour) -> None:
        """A convex polygon, its corners in order (either way round)."""
        p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        found = self._window(p[:, 0].min(), p[:, 0].max(), p[:, 1].min(), p[:, 1].max())
        if found is None or len(p) < 3:
            return
        window, x, y = found
        q = np.roll(p, -1, axis=0)
        # the side of each edge every pixel centre is on: inside is the same side of all
        cross = [(bx - ax) * (y - ay) - (by - ay) * (x - ax) for (ax, ay), (bx, by) in zip(p, q)]
        inside = np.logical_and.reduce([c >= 0 for c in cross]) | np.logical_and.reduce([c <= 0 for c in cross])
        self._fill(window, inside, colour)

    def line(self, a, b, width: float, colour) -> None:
        """The segment from ``a`` to ``b``, ``width`` thick, with square-cut ends."""
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        d = b - a
        length = float(np.hypot(*d))
        if length == 0.0:
            return
        n = np.array([-d[1], d[0]]) / length * (width / 2)
        self.polygon([a + n, b + n, b - n, a - n], colour)

    def polyline(self, points, width: float, colour) -> None:
        """Segments through ``points``, joined by discs (round joints)."""
        p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        for a, b in zip(p[:-1], p[1:]):
            self.line(a, b, width, colour)
        for c in p[1:-1]:
            self.disc(c, width / 2, colour)

    def frame(self) -> np.ndarray:
        """The picture: uint8 ``[height, width, 3]``."""
        return (np.clip(self.image, 0.0, 1.0) * 255).round().astype(np.uint8)


def draw_discs(centres: np.ndarray, radii: np.ndarray, colours, extent: float, resolution: int = 400,
               background=(1.0, 1.0, 1.0)) -> np.ndarray:
    """An RGB frame (uint8, ``[resolution, resolution, 3]``) of the square ``[-extent, extent]^2``
    with a disc per centre (``y`` up), drawn in order (later discs on top); colours in [0, 1]."""
    resolution = check_resolution(resolution)
    canvas = Canvas(resolution, resolution, (-extent, extent), (-extent, extent), background)
    for centre, r, colour in zip(centres, radii, colours):
        canvas.disc(centre, r, colour)
    return canvas.frame()
