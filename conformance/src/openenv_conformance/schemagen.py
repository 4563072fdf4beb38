"""Hypothesis strategies for JSON Schema (draft 2020-12, the subset environments use).

``hypothesis-jsonschema`` would be the natural choice, but its latest release (0.23.1)
drives private Hypothesis internals that Hypothesis 6.170 no longer has (object schemas
fail with ``AttributeError: 'many' object has no attribute 'more'``), so this module
generates from the schema's structure instead: ``type`` (and lists of types), ``enum``,
``const``, ``properties``/``required``/``additionalProperties``, ``items``/``prefixItems``,
``minItems``/``maxItems``, ``minLength``/``maxLength``, ``pattern``, numeric bounds,
``anyOf``/``oneOf``/``allOf`` and local ``$ref`` (``#/$defs/...``, ``#/definitions/...``).
Every value is then checked with ``jsonschema`` (the validator servers use) and kept only
when valid, so keywords not understood here can narrow, but never break, what is generated.
"""

from __future__ import annotations

import json
import math
from typing import Any

import jsonschema
from hypothesis import strategies as st

__all__ = ["from_schema"]

_MAX_INT = 2**53
_MAX_DEPTH = 5


def _json_leaf() -> st.SearchStrategy[Any]:
    return (
        st.none()
        | st.booleans()
        | st.integers(-_MAX_INT, _MAX_INT)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=12)
    )


def _any_json() -> st.SearchStrategy[Any]:
    return st.recursive(
        _json_leaf(),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
        max_leaves=6,
    )


class _Gen:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            raise ValueError(f"only local $ref is supported, got {ref!r}")
        node: Any = self.root
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def gen(self, schema: Any, depth: int = 0) -> st.SearchStrategy[Any]:
        if schema is True or schema == {}:
            return _any_json()
        if schema is False:
            return st.nothing()
        if not isinstance(schema, dict):
            return _any_json()
        if depth > _MAX_DEPTH:
            return st.nothing()
        if "$ref" in schema:
            target = self.resolve(schema["$ref"])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return self.gen({**target, **rest} if isinstance(target, dict) else target, depth + 1)
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(list(schema["enum"]))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                base = {k: v for k, v in schema.items() if k != key}
                return st.one_of(
                    [self.gen({**base, **sub} if isinstance(sub, dict) else sub, depth + 1) for sub in schema[key]]
                )
        if "allOf" in schema:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for sub in schema["allOf"]:
                if isinstance(sub, dict):
                    sub = self.resolve(sub["$ref"]) if "$ref" in sub else sub
                    for k, v in sub.items():
                        if k == "properties":
                            merged["properties"] = {**merged.get("properties", {}), **v}
                        elif k == "required":
                            merged["required"] = sorted(set(merged.get("required", [])) | set(v))
                        else:
                            merged.setdefault(k, v)
            return self.gen(merged, depth + 1)
        types = schema.get("type")
        if isinstance(types, str):
            types = [types]
        if not types:
            if "properties" in schema or "required" in schema or "additionalProperties" in schema:
                types = ["object"]
            elif "items" in schema or "prefixItems" in schema:
                types = ["array"]
            elif any(k in schema for k in ("minLength", "maxLength", "pattern")):
                types = ["string"]
            elif any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
                types = ["number"]
            else:
                return _any_json()
        return st.one_of([self.typed(t, schema, depth) for t in types])

    def typed(self, t: str, s: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
        if t == "null":
            return st.none()
        if t == "boolean":
            return st.booleans()
        if t in ("integer", "number"):
            lo = s.get("minimum", -_MAX_INT)
            hi = s.get("maximum", _MAX_INT)
            if "exclusiveMinimum" in s and isinstance(s["exclusiveMinimum"], (int, float)):
                lo = max(lo, s["exclusiveMinimum"] + (1 if t == "integer" else 0))
            if "exclusiveMaximum" in s and isinstance(s["exclusiveMaximum"], (int, float)):
                hi = min(hi, s["exclusiveMaximum"] - (1 if t == "integer" else 0))
            ilo, ihi = max(math.ceil(lo), -_MAX_INT), min(math.floor(hi), _MAX_INT)
            ints = st.integers(ilo, ihi) if ilo <= ihi else st.nothing()
            if t == "integer":
                return ints
            return ints | st.floats(
                min_value=max(lo, -1e300),
                max_value=min(hi, 1e300),
                allow_nan=False,
                allow_infinity=False,
                exclude_min="exclusiveMinimum" in s,
                exclude_max="exclusiveMaximum" in s,
            )
        if t == "string":
            lo = int(s.get("minLength", 0))
            hi = int(s.get("maxLength", lo + 16))
            if "pattern" in s:
                return st.from_regex(s["pattern"]).filter(lambda x: lo <= len(x) <= hi)
            return st.text(min_size=lo, max_size=hi)
        if t == "array":
            lo = int(s.get("minItems", 0))
            hi = int(s.get("maxItems", lo + 3))
            prefix = [self.gen(p, depth + 1) for p in s.get("prefixItems", [])]
            items = s.get("items", {})
            rest = self.gen(items, depth + 1) if items is not False else st.nothing()
            tail = st.lists(
                rest,
                min_size=max(0, lo - len(prefix)),
                max_size=max(0, hi - len(prefix)),
                unique_by=(lambda x: json.dumps(x, sort_keys=True)) if s.get("uniqueItems") else None,
            )
            if prefix:
                return st.tuples(st.tuples(*prefix), tail).map(lambda pt: [*pt[0], *pt[1]])
            return tail
        if t == "object":
            props: dict[str, Any] = s.get("properties", {}) or {}
            required = [r for r in s.get("required", []) if isinstance(r, str)]
            req = {k: self.gen(props.get(k, {}), depth + 1) for k in required}
            opt = {k: self.gen(v, depth + 1) for k, v in props.items() if k not in req}
            extra = s.get("additionalProperties", True)
            extras: st.SearchStrategy[dict[str, Any]] = st.just({})
            if extra is not False:
                names = st.text(min_size=1, max_size=8).filter(lambda k: k not in props)
                extras = (
                    st.dictionaries(names, self.gen(extra if isinstance(extra, dict) else True, depth + 1), max_size=2)
                    if depth < 2
                    else st.just({})
                )
            return st.tuples(st.fixed_dictionaries(req, optional=opt), extras).map(lambda de: {**de[1], **de[0]})
        return st.nothing()


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under ``schema`` (each one checked with ``jsonschema``). Raises
    ``ValueError`` for schemas it cannot read (e.g. remote ``$ref``)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    validator = cls(schema)
    try:
        strategy = _Gen(schema).gen(schema)
    except (KeyError, TypeError) as e:
        raise ValueError(f"cannot generate values for this schema: {e}") from None
    return strategy.filter(validator.is_valid)
