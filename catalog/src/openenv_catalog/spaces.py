"""Gymnasium spaces as openenv type declarations, and values both ways.

A ``Box`` becomes a :class:`openenv.TensorSpec` (bounds when they are finite and the same
for every element); ``Discrete`` an integer JSON Schema with its range; ``MultiBinary`` and
``MultiDiscrete`` integer tensors; ``Tuple``, ``Dict`` and a nested ``Box`` JSON Schemas
(arrays and objects) whose values travel as JSON.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import openenv

__all__ = ["declaration", "from_wire", "json_schema", "json_value", "to_wire"]


def _uniform(bound: Any) -> float | None:
    arr = np.asarray(bound, dtype=np.float64)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or not np.all(arr == arr.flat[0]):
        return None
    return float(arr.flat[0])


def declaration(space: Any) -> Any:
    """The openenv declaration (``action_type``/``observation_type``) of a top-level space."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return openenv.TensorSpec(space.dtype, tuple(space.shape), _uniform(space.low), _uniform(space.high))
    if isinstance(space, (spaces.MultiBinary, spaces.MultiDiscrete)):
        return openenv.TensorSpec(space.dtype, tuple(space.shape), 0, None)
    return json_schema(space)


def json_schema(space: Any) -> dict[str, Any]:
    """A JSON Schema of the space's values in their JSON form."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return {"type": "integer", "minimum": start, "maximum": start + int(space.n) - 1}
    if isinstance(space, spaces.Box):
        item: dict[str, Any] = {"type": "integer" if np.issubdtype(space.dtype, np.integer) else "number"}
        lo, hi = _uniform(space.low), _uniform(space.high)
        if lo is not None:
            item["minimum"] = lo
        if hi is not None:
            item["maximum"] = hi
        schema = item
        for n in reversed(space.shape):
            schema = {"type": "array", "items": schema, "minItems": int(n), "maxItems": int(n)}
        return schema
    if isinstance(space, spaces.MultiBinary):
        return json_schema(spaces.Box(0, 1, space.shape, np.int8))
    if isinstance(space, spaces.Tuple):
        items = [json_schema(s) for s in space.spaces]
        return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items), "maxItems": len(items)}
    if isinstance(space, spaces.Dict):
        props = {k: json_schema(s) for k, s in space.spaces.items()}
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    if isinstance(space, spaces.Text):
        return {"type": "string", "minLength": int(space.min_length), "maxLength": int(space.max_length)}
    raise ValueError(f"unsupported space {space!r}")


def to_wire(space: Any, value: Any) -> Any:
    """A space's value in the form its declaration carries (arrays stay arrays for tensors)."""
    decl = declaration(space)
    if isinstance(decl, openenv.TensorSpec):
        return np.asarray(value, dtype=space.dtype)
    return _json(space, value)


def json_value(space: Any, value: Any) -> Any:
    """A space's value in its JSON form (the form :func:`json_schema` describes), tensors too."""
    return _json(space, value)


def _json(space: Any, value: Any) -> Any:
    from gymnasium import spaces

    if isinstance(space, spaces.Tuple):
        return [_json(s, v) for s, v in zip(space.spaces, value, strict=True)]
    if isinstance(space, spaces.Dict):
        return {k: _json(s, value[k]) for k, s in space.spaces.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def from_wire(space: Any, value: Any) -> Any:
    """A decoded action as the space's own value (arrays of its dtype, tuples, dicts)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return np.int64(value)
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return np.asarray(value, dtype=space.dtype).reshape(space.shape)
    if isinstance(space, spaces.Tuple):
        return tuple(from_wire(s, v) for s, v in zip(space.spaces, value, strict=True))
    if isinstance(space, spaces.Dict):
        return {k: from_wire(s, value[k]) for k, s in space.spaces.items()}
    return value
