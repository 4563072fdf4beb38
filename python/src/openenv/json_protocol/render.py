"""The JSON of an environment's picture (``Environment.render``), as ``/ws`` sends it.

``{"mime": "image/svg+xml", "data": "<svg ...>"}``, ``{"mime": "image/png", "data": <base64>}``,
``{"mime": "image/x-raw-rgb", "width", "height", "channels": 3|4, "data": <base64 of the
row-major uint8 bytes>}`` (what the playground puts on a canvas), or
``{"mime": "text/plain", "data": "..."}``.
"""

from __future__ import annotations

import base64
from typing import Any

from openenv.errors import InvalidArgument

__all__ = ["render_to_json"]

_PNG = b"\x89PNG\r\n\x1a\n"


def render_to_json(value: Any) -> dict[str, Any]:
    """Shape a render hook's return value; INVALID_ARGUMENT for anything else."""
    if isinstance(value, str):
        head = value.lstrip()[:200].lower()
        if head.startswith("<svg") or (head.startswith("<?xml") and "<svg" in value[:1000].lower()):
            return {"mime": "image/svg+xml", "data": value}
        return {"mime": "text/plain", "data": value}
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if raw.startswith(_PNG):
            return {"mime": "image/png", "data": base64.b64encode(raw).decode()}
        raise InvalidArgument("render returned bytes that are not a PNG image")
    import numpy as np  # on first render of an image, not with the bridge

    arr = np.asarray(value)
    if arr.ndim == 3 and arr.shape[2] in (3, 4) and arr.size:
        if arr.dtype != np.uint8:
            if not np.issubdtype(arr.dtype, np.number) or arr.min() < 0 or arr.max() > 255:
                raise InvalidArgument("an RGB(A) render must hold values from 0 to 255")
            arr = arr.astype(np.uint8)
        h, w, c = arr.shape
        return {
            "mime": "image/x-raw-rgb",
            "width": int(w),
            "height": int(h),
            "channels": int(c),
            "data": base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode(),
        }
    raise InvalidArgument(
        f"render must return SVG text, PNG bytes, an (H, W, 3|4) uint8 array or text, got {type(value).__name__}"
    )
