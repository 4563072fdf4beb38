"""``Environment.render`` results as ``/ws`` sends them (``openenv.json_protocol.render``): each kind
a person can look at keeps its bytes; anything else is a clear INVALID_ARGUMENT."""

from __future__ import annotations

import base64

import numpy as np
import pytest

import openenv
from openenv.json_protocol.render import render_to_json

PNG_1x1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def test_svg_text_is_sent_as_svg_and_other_text_as_text() -> None:
    svg = '<svg xmlns="http://www.w3.org/2000/svg"/>'
    assert render_to_json(svg) == {"mime": "image/svg+xml", "data": svg}
    xml = '<?xml version="1.0"?>\n' + svg
    assert render_to_json(xml)["mime"] == "image/svg+xml"
    assert render_to_json("A . G") == {"mime": "text/plain", "data": "A . G"}


def test_png_bytes_travel_as_base64_and_other_bytes_are_refused() -> None:
    out = render_to_json(PNG_1x1)
    assert out["mime"] == "image/png" and base64.b64decode(out["data"]) == PNG_1x1
    with pytest.raises(openenv.InvalidArgument, match="not a PNG"):
        render_to_json(b"GIF89a...")


def test_rgb_and_rgba_arrays_keep_their_bytes_and_shape() -> None:
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    out = render_to_json(rgb)
    assert (out["mime"], out["width"], out["height"], out["channels"]) == ("image/x-raw-rgb", 3, 2, 3)
    assert base64.b64decode(out["data"]) == rgb.tobytes()
    rgba = render_to_json(np.full((1, 1, 4), 7).tolist())  # nested lists of ints work too
    assert rgba["channels"] == 4 and base64.b64decode(rgba["data"]) == bytes([7, 7, 7, 7])


@pytest.mark.parametrize(
    "bad",
    [np.full((2, 2, 3), 300), np.zeros((2, 2)), np.zeros((2, 2, 5), dtype=np.uint8), 42, None],
    ids=["out-of-range", "2d", "5-channels", "number", "none"],
)
def test_anything_else_is_invalid_argument(bad: object) -> None:
    with pytest.raises(openenv.InvalidArgument):
        render_to_json(bad)
