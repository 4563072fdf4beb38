"""A minimal PNG reader for the browser tests (8-bit RGB/RGBA, non-interlaced: what
Chromium's screenshots are), so checking a screenshot needs no imaging library."""

from __future__ import annotations

import struct
import zlib

import numpy as np

__all__ = ["read_png"]


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_png(data: bytes) -> np.ndarray:
    """The pixels of a PNG as an array of shape (height, width, channels), uint8."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, bytearray(), None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("no IHDR")
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG (depth {depth}, color type {color}, interlace {interlace})")
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(bytes(idat))
    stride = width * bpp
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1)
        if f == 0:
            cur = line.copy()
        elif f == 1:  # Sub: a running sum of each channel along the row
            cur = (np.cumsum(line.reshape(width, bpp).astype(np.int64), axis=0) & 0xFF).astype(np.uint8).reshape(-1)
        elif f == 2:  # Up
            cur = (line.astype(np.uint16) + prev).astype(np.uint8)
        else:  # Average or Paeth: sequential along the row
            cur_b = bytearray(stride)
            lb, pb = line.tobytes(), prev.tobytes()
            for i in range(stride):
                a = cur_b[i - bpp] if i >= bpp else 0
                b = pb[i]
                if f == 3:
                    cur_b[i] = (lb[i] + ((a + b) >> 1)) & 0xFF
                else:
                    c = pb[i - bpp] if i >= bpp else 0
                    cur_b[i] = (lb[i] + _paeth(a, b, c)) & 0xFF
            cur = np.frombuffer(bytes(cur_b), dtype=np.uint8)
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)
