"""Frames of an environment drawn with numpy alone: no display, no extra dependency.

Examples:
    >>> import numpy as np
    >>> frame = draw_discs(np.array([[0.0, 0.0]]), np.array([0.5]), [(1.0, 0.0, 0.0)], extent=1.0, resolution=8)
    >>> frame.shape, frame.dtype, frame[4, 4].tolist()
    ((8, 8, 3), dtype('uint8'), [255, 0, 0])
"""
from __future__ import annotations

import numpy as np

__all__ = ["draw_discs"]


def draw_discs(centres: np.ndarray, radii: np.ndarray, colours, extent: float, resolution: int = 400,
               background=(1.0, 1.0, 1.0)) -> np.ndarray:
    """An RGB frame (uint8, ``[resolution, resolution, 3]``) of the square ``[-extent, extent]^2``
    with a disc per centre (``y`` up), drawn in order (later discs on top); colours in [0, 1]."""
    if not (isinstance(resolution, int) and 8 <= resolution <= 4096):
        raise ValueError(f"resolution must be an int in [8, 4096], got {resolution!r}")
    side = (np.arange(resolution) + 0.5) / resolution * 2 * extent - extent
    x, y = np.meshgrid(side, side[::-1])
    frame = np.empty((resolution, resolution, 3))
    frame[:] = background
    for (cx, cy), r, colour in zip(centres, radii, colours):
        frame[(x - cx) ** 2 + (y - cy) ** 2 <= r * r] = colour
    return (frame * 255).round().astype(np.uint8)
