"""Scatter plots drawn into PNG images: the gallery's panels as pictures, not as plotted points.

A browser without a GPU (SwiftShader, headless Chromium, many laptops' remote desktops) is slow to
redraw tens of thousands of WebGL points, and the gallery's page was redrawn with every layer that
arrived. One row of panels as one PNG costs the server a little numpy and the browser nearly nothing
to place (measured: docs/dashboard.md, "Measured costs the code points to"). Pure numpy and zlib::

    index = palette_index(positions, lo=0, hi=451)                       # palette entries 1..255
    img = draw_points(xs, ys, index, size=(w, h), radius=2.5)            # pixels -> [h, w] palette image
    png = png_bytes(img, palette())                                      # PNG file bytes, 0 transparent
"""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np

# plotly's "Viridis" (plotly.colors.sequential.Viridis): ten evenly spaced stops, interpolated linearly in RGB
VIRIDIS = ("#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b",
           "#fde725")  # fmt: skip


def colour_scale(
    values: np.ndarray, *, lo: float, hi: float, stops: tuple[str, ...] = VIRIDIS
) -> np.ndarray:
    """RGB uint8 [len(values), 3] of ``values`` on a colour scale from ``lo`` to ``hi`` (as plotly maps a
    marker's ``color`` with ``cmin``/``cmax``)."""
    rgb = np.array(
        [[int(s[i : i + 2], 16) for i in (1, 3, 5)] for s in stops], dtype=np.float64
    )  # [stop, 3]
    t = (
        (np.asarray(values, dtype=np.float64) - lo) / (hi - lo)
        if hi > lo
        else np.zeros(np.shape(values))
    )
    pos = np.clip(t, 0.0, 1.0) * (len(stops) - 1)
    k = np.minimum(pos.astype(np.int64), len(stops) - 2)
    w = (pos - k)[:, None]
    return np.rint(rgb[k] * (1 - w) + rgb[k + 1] * w).astype(np.uint8)


def palette(*, levels: int = 255) -> np.ndarray:
    """RGB [levels + 1, 3]: entry 0 is the transparent background, entries 1..levels the colour scale
    from its low end to its high end."""
    return np.concatenate(
        [np.zeros((1, 3), np.uint8), colour_scale(np.linspace(0.0, 1.0, levels), lo=0.0, hi=1.0)]
    )


def palette_index(values: np.ndarray, *, lo: float, hi: float, levels: int = 255) -> np.ndarray:
    """uint8 palette entries (1..levels) of ``values`` on the scale from ``lo`` to ``hi``: the nearest of
    ``levels`` evenly spaced colours (at most 1/(2 (levels - 1)) of the scale away from the exact one)."""
    t = (
        (np.asarray(values, dtype=np.float64) - lo) / (hi - lo)
        if hi > lo
        else np.zeros(np.shape(values))
    )
    return (1 + np.rint(np.clip(t, 0.0, 1.0) * (levels - 1))).astype(np.uint8)


def _disc(radius: float) -> tuple[np.ndarray, np.ndarray]:
    r = int(np.ceil(radius))
    dy, dx = np.mgrid[-r : r + 1, -r : r + 1]
    inside = dx * dx + dy * dy <= radius * radius
    return dx[inside], dy[inside]


def draw_points(
    xs: np.ndarray, ys: np.ndarray, index: np.ndarray, *, size: tuple[int, int], radius: float
) -> np.ndarray:
    """Palette image [height, width] uint8: 0 (transparent) but for a disc of ``radius`` pixels at each
    point (``xs``, ``ys`` in pixels from the top left; ``index`` its palette entry, 1..255); later
    points on top."""
    width, height = size
    img = np.zeros((height, width), dtype=np.uint8)
    dx, dy = _disc(radius)
    cx, cy = np.rint(np.asarray(xs)).astype(np.int64), np.rint(np.asarray(ys)).astype(np.int64)
    px, py = (cx[:, None] + dx).ravel(), (cy[:, None] + dy).ravel()  # [point * stamp], point-major
    values = np.repeat(np.asarray(index, dtype=np.uint8), len(dx))
    ok = (px >= 0) & (px < width) & (py >= 0) & (py < height)
    img[py[ok], px[ok]] = values[
        ok
    ]  # repeated pixels: the last write wins, as a later point covers an earlier
    return img


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def png_bytes(index: np.ndarray, colours: np.ndarray, *, level: int = 6) -> bytes:
    """A PNG file of a palette image ``index`` [height, width] uint8 with ``colours`` RGB [k, 3]; entry 0
    is transparent (8 bits a pixel, no filter: a quarter of RGBA's bytes to compress and send)."""
    height, width = index.shape
    raw = np.concatenate([np.zeros((height, 1), np.uint8), index], axis=1)
    header = struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"PLTE", np.asarray(colours, np.uint8).tobytes())
            + _chunk(b"tRNS", b"\x00") + _chunk(b"IDAT", zlib.compress(raw.tobytes(), level)) + _chunk(b"IEND", b""))  # fmt: skip


def png_data_uri(index: np.ndarray, colours: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(index, colours)).decode("ascii")


def read_png(data: bytes | str) -> np.ndarray:
    """RGBA [height, width, 4] of a PNG written by ``png_bytes`` (or its data URI): for tests and checks."""
    if isinstance(data, str):
        data = base64.b64decode(data.split(",", 1)[1])
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, plte, trns = 8, b"", 0, 0, b"", b""
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
            assert body[8:] == bytes([8, 3, 0, 0, 0]), "only 8-bit palette images, no interlace"
        elif kind == b"PLTE":
            plte = body
        elif kind == b"tRNS":
            trns = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    rows = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width)
    assert not rows[:, 0].any(), "only unfiltered rows"
    rgb = np.frombuffer(plte, dtype=np.uint8).reshape(-1, 3)
    alpha = np.full(len(rgb), 255, np.uint8)
    alpha[: len(trns)] = np.frombuffer(trns, dtype=np.uint8)
    index = rows[:, 1:]
    return np.concatenate([rgb[index], alpha[index][..., None]], axis=-1)
