"""Tools: environment methods an agent may call, shaped after MCP.

Mark a method with :func:`tool`; its JSON Schemas come from the type hints (pydantic),
its descriptions from the docstring. Arguments are validated against the advertised
``input_schema`` itself (jsonschema, no coercion) before the call, ``InvalidArgument`` on
a violation; a tool that raises returns a :class:`ToolResult` with ``is_error=True`` (a
result, not a protocol error), as MCP prescribes. See docs/tools.md.
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from openenv.errors import InvalidArgument
from openenv.runtime.codec import from_struct, pydantic_compatible, to_struct
from openenv.v1 import tool_pb2

__all__ = ["CallToolAction", "CallToolObservation", "Tool", "ToolResult", "tool"]

RESERVED_TOOL_NAMES = frozenset({"reset", "step", "state", "close"})
#: The annotation key of a tool that grades submitted work (RFC 0015; openenv.runtime.grading).
GRADING_ANNOTATION = "openenv/grading"
#: The languages a grading annotation may name for the submitted work.
GRADING_LANGUAGES = ("python", "shell", "sql", "text")


@dataclasses.dataclass
class ToolResult:
    """What a tool returned, as MCP's ``CallToolResult``.

    ``content`` holds MCP content blocks as dicts (``{"type": "text", "text": ...}``,
    ``{"type": "image", "data": <base64>, "mimeType": ...}``, ...). ``data`` is the
    structured value (unwrapped from ``{"result": ...}``). Subscripting with
    ``"content"``, ``"structured_content"``, ``"data"`` or ``"is_error"`` works as on
    OpenEnv's dumped results.
    """

    content: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    structured_content: dict[str, Any] | None = None
    is_error: bool = False

    @property
    def data(self) -> Any:
        sc = self.structured_content
        if sc is None:
            texts = [c.get("text", "") for c in self.content if c.get("type") == "text"]
            return "\n".join(texts) if texts else None
        if set(sc) == {"result"}:
            return sc["result"]
        return sc

    @property
    def text(self) -> str:
        """All text content, joined by newlines."""
        return "\n".join(c.get("text", "") for c in self.content if c.get("type") == "text")

    def __getitem__(self, key: str) -> Any:
        if key in ("content", "structured_content", "data", "is_error"):
            return getattr(self, key)
        raise KeyError(key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "structured_content": self.structured_content,
            "data": self.data,
            "is_error": self.is_error,
        }

    @classmethod
    def of(cls, value: Any) -> ToolResult:
        """Wrap a tool's return value: text for strings, JSON text plus structured content else."""
        if isinstance(value, ToolResult):
            return value
        if isinstance(value, str):
            return cls([{"type": "text", "text": value}], {"result": value})
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        elif hasattr(value, "model_dump"):
            value = value.model_dump(mode="json")
        text = json.dumps(value, separators=(",", ":"), default=str)
        sc = value if isinstance(value, dict) else {"result": value}
        return cls([{"type": "text", "text": text}], sc)

    def to_proto(self, out: tool_pb2.ToolResult | None = None) -> tool_pb2.ToolResult:
        r = tool_pb2.ToolResult() if out is None else out
        r.is_error = self.is_error
        if self.structured_content is not None:
            to_struct(self.structured_content, r.structured_content)
        for c in self.content:
            b = r.content.add()
            t = c.get("type")
            if t == "text":
                b.text.text = c.get("text", "")
            elif t in ("image", "audio"):
                getattr(b, t).data = base64.b64decode(c.get("data", ""))
                getattr(b, t).mime_type = c.get("mimeType", "")
            elif t == "resource":
                res = c.get("resource", {})
                b.resource.uri = res.get("uri", "")
                b.resource.mime_type = res.get("mimeType", "")
                if "blob" in res:
                    b.resource.blob = base64.b64decode(res["blob"])
                else:
                    b.resource.text = res.get("text", "")
            else:
                raise ValueError(f"unknown content block type {t!r}")
        return r

    @classmethod
    def from_proto(cls, r: tool_pb2.ToolResult) -> ToolResult:
        content: list[dict[str, Any]] = []
        for b in r.content:
            k = b.WhichOneof("kind")
            if k == "text":
                content.append({"type": "text", "text": b.text.text})
            elif k in ("image", "audio"):
                m = getattr(b, k)
                content.append({"type": k, "data": base64.b64encode(m.data).decode(), "mimeType": m.mime_type})
            elif k == "resource":
                res: dict[str, Any] = {"uri": b.resource.uri, "mimeType": b.resource.mime_type}
                if b.resource.WhichOneof("contents") == "blob":
                    res["blob"] = base64.b64encode(b.resource.blob).decode()
                else:
                    res["text"] = b.resource.text
                content.append({"type": "resource", "resource": res})
        sc = from_struct(r.structured_content) if r.HasField("structured_content") else None
        return cls(content, sc, r.is_error)


@dataclasses.dataclass
class CallToolAction:
    """A step action that calls a tool (OpenEnv's ``CallToolAction``)."""

    tool_name: str
    arguments: dict[str, Any] = dataclasses.field(default_factory=dict)
    timeout_s: float | None = None

    __openenv_proto__ = tool_pb2.CallToolRequest

    def to_proto(self) -> tool_pb2.CallToolRequest:
        req = tool_pb2.CallToolRequest(name=self.tool_name)
        to_struct(self.arguments, req.arguments)
        if self.timeout_s is not None:
            req.timeout.FromNanoseconds(int(self.timeout_s * 1e9))
        return req

    @classmethod
    def from_proto(cls, req: tool_pb2.CallToolRequest) -> CallToolAction:
        timeout = req.timeout.ToNanoseconds() / 1e9 if req.HasField("timeout") else None
        return cls(req.name, from_struct(req.arguments), timeout)


@dataclasses.dataclass
class CallToolObservation:
    """The observation of a tool-call step: which tool ran and what it returned.

    ``metadata`` is filled from the time step's metadata by typed clients.
    """

    tool_name: str = ""
    result: ToolResult | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    __openenv_proto__ = tool_pb2.CallToolResponse

    def to_proto(self) -> tool_pb2.CallToolResponse:
        resp = tool_pb2.CallToolResponse(name=self.tool_name)
        if self.result is not None:
            self.result.to_proto(resp.result)
        return resp

    @classmethod
    def from_proto(cls, resp: tool_pb2.CallToolResponse) -> CallToolObservation:
        return cls(resp.name, ToolResult.from_proto(resp.result) if resp.HasField("result") else None)


@dataclasses.dataclass(frozen=True)
class Tool:
    """A tool's descriptor (MCP ``Tool``)."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = dataclasses.field(default_factory=lambda: {"type": "object"})
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None

    def to_proto(self) -> tool_pb2.Tool:
        t = tool_pb2.Tool(name=self.name, description=self.description)
        to_struct(self.input_schema, t.input_schema)
        if self.output_schema is not None:
            to_struct(self.output_schema, t.output_schema)
        if self.annotations is not None:
            to_struct(self.annotations, t.annotations)
        return t

    @classmethod
    def from_proto(cls, t: tool_pb2.Tool) -> Tool:
        return cls(
            t.name,
            t.description,
            from_struct(t.input_schema),
            from_struct(t.output_schema) if t.HasField("output_schema") else None,
            from_struct(t.annotations) if t.HasField("annotations") else None,
        )


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _output_schema(ann: Any) -> dict[str, Any] | None:
    """JSON Schema of ``structured_content`` from a return annotation, or None.

    Object types (dicts, dataclasses, TypedDicts, models) give their own schema; any
    other type is wrapped as ``{"result": <schema>}``, matching :meth:`ToolResult.of`.
    No annotation, ``None``, ``Any``, unions of objects and non-objects, and annotations
    mentioning :class:`ToolResult` give no schema.
    """
    import typing

    from pydantic import TypeAdapter
    from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError

    if ann in (inspect.Signature.empty, None, type(None), Any):
        return None

    def mentions_result(tp: Any) -> bool:
        return tp is ToolResult or any(mentions_result(a) for a in typing.get_args(tp))

    if mentions_result(ann):
        return None
    try:
        schema: dict[str, Any] = _strip_titles(TypeAdapter(pydantic_compatible(ann)).json_schema())  # a dict, as given
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError):
        return None
    if schema.get("type") == "object":
        return schema
    variants = schema.get("anyOf", schema.get("oneOf", [schema]))
    if any(v.get("type") == "object" or "$ref" in v for v in variants if isinstance(v, dict)):
        return None  # an object sometimes and a wrapped value other times: no single schema
    defs = schema.pop("$defs", None)
    wrapped: dict[str, Any] = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
    if defs:
        wrapped["$defs"] = defs
    return wrapped


def _schema_validator(schema: dict[str, Any]) -> Any:
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def _error_loc(e: Any) -> list[Any]:
    """Where a JSON Schema error is: its path, plus the offending property for
    ``required`` and ``additionalProperties`` errors (whose path is the parent object)."""
    loc = list(e.path)
    inst = e.instance
    if e.validator == "required" and isinstance(inst, dict):
        missing = [p for p in e.validator_value if p not in inst]
        loc += missing[:1]
    elif e.validator == "additionalProperties" and isinstance(inst, dict):
        known = set(e.schema.get("properties", {}))
        extra = [k for k in inst if k not in known]
        loc += extra[:1]
    return loc


def _param_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section (continuation lines,
    indented deeper than the parameter's line, are joined to its description)."""
    out: dict[str, str] = {}
    in_args, base, cur = False, -1, ""
    for line in doc.splitlines():
        if re.fullmatch(r"\s*(Args|Arguments|Parameters):\s*", line):
            in_args, base, cur = True, -1, ""
            continue
        if not in_args or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        pm = re.match(r"\s*\**(\w+)(\s*\([^)]*\))?:\s*(.*)", line)
        if pm and (base < 0 or indent == base):
            base, cur = indent, pm.group(1)
            out[cur] = pm.group(3).strip()
        elif cur and indent > base:
            out[cur] = f"{out[cur]} {line.strip()}".strip()
        else:
            in_args = False  # the section ended (e.g. "Returns:")
    return out


@dataclasses.dataclass
class ToolDef:
    """A tool bound to an environment class: descriptor, validator and the function."""

    fn: Callable[..., Any]
    descriptor: Tool
    is_async: bool
    timeout_s: float | None
    _validate: Callable[[dict[str, Any]], dict[str, Any]]

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return self._validate(arguments)


def _build(
    fn: Callable[..., Any],
    name: str | None,
    description: str | None,
    timeout_s: float | None,
    annotations: dict[str, Any] | None = None,
) -> ToolDef:
    from pydantic import ConfigDict, ValidationError, create_model

    tool_name = name or fn.__name__
    if tool_name in RESERVED_TOOL_NAMES:
        raise ValueError(f"tool name {tool_name!r} is reserved ({', '.join(sorted(RESERVED_TOOL_NAMES))})")
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", tool_name):
        raise ValueError(f"tool name {tool_name!r} must match [A-Za-z0-9_.-]{{1,128}}")
    doc = inspect.getdoc(fn) or ""
    pdocs = _param_docs(doc)
    sig = inspect.signature(fn)
    hints = inspect.get_annotations(fn, eval_str=True)
    fields: dict[str, Any] = {}
    for i, (pname, p) in enumerate(sig.parameters.items()):
        if i == 0 and pname in ("self", "cls"):
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name!r}: *args/**kwargs parameters cannot be described by a schema")
        ann = hints.get(pname, Any)
        from pydantic import Field

        default = ... if p.default is p.empty else p.default
        fields[pname] = (ann, Field(default, description=pdocs.get(pname)))
    model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    schema = _strip_titles(model.model_json_schema())
    schema.setdefault("properties", {})
    summary = description if description is not None else doc.split("\n\n")[0].strip()

    schema_validator = _schema_validator(schema)

    def validate(arguments: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(arguments, dict):
            raise InvalidArgument(f"tool {tool_name!r}: arguments must be an object")
        # The advertised input_schema is the contract: check it first (exactly what a client
        # sees), then let pydantic convert (e.g. objects into dataclasses).
        errors = sorted(schema_validator.iter_errors(arguments), key=lambda e: (len(e.path), list(map(str, e.path))))
        if errors:
            details = [{"loc": _error_loc(e), "msg": e.message, "type": str(e.validator)} for e in errors[:20]]
            loc = ".".join(str(x) for x in details[0]["loc"]) or "arguments"
            raise InvalidArgument(f"tool {tool_name!r}: invalid argument {loc}: {details[0]['msg']}", details=details)
        try:
            inst = model.model_validate(arguments)
        except ValidationError as e:
            details = json.loads(e.json(include_url=False, include_input=False))
            first = details[0]
            loc = ".".join(str(x) for x in first.get("loc", ())) or "arguments"
            raise InvalidArgument(
                f"tool {tool_name!r}: invalid argument {loc}: {first['msg']}", details=details
            ) from None
        return {k: getattr(inst, k) for k in fields}

    descriptor = Tool(
        tool_name,
        summary,
        schema,
        _output_schema(hints.get("return", inspect.Signature.empty)),
        dict(annotations) if annotations else None,
    )
    return ToolDef(fn, descriptor, inspect.iscoroutinefunction(fn), timeout_s, validate)


def grading_annotation(grades: bool | Mapping[str, Any]) -> dict[str, Any]:
    """The annotation ``@openenv.tool(grades=...)`` writes; ValueError on a malformed declaration."""
    spec: dict[str, Any] = dict(grades) if isinstance(grades, Mapping) else {}
    unknown = set(spec) - {"argument", "language"}
    if unknown:
        raise ValueError(f"grades: unknown keys {sorted(unknown)} (known: argument, language)")
    if "argument" in spec and not isinstance(spec["argument"], str):
        raise ValueError("grades: 'argument' names the argument holding the submitted work (a string)")
    if "language" in spec and spec["language"] not in GRADING_LANGUAGES:
        raise ValueError(f"grades: 'language' must be one of {', '.join(GRADING_LANGUAGES)}")
    return {GRADING_ANNOTATION: spec}


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    annotations: dict[str, Any] | None = None,
    grades: bool | dict[str, Any] = False,
) -> Any:
    """Mark an environment method as a tool.

    Usable bare (``@tool``) or with options (``@tool(name=..., timeout_s=...)``). The
    method may be sync or async. Reserved names (reset, step, state, close) are refused
    here, at definition time.

    Args:
        name: the tool's name (default: the method's name).
        description: for the agent (default: the docstring's first paragraph).
        timeout_s: upper bound on one call; when it elapses the call answers
            DEADLINE_EXCEEDED (a shorter ``CallToolRequest.timeout`` wins). Sync tools
            can only be bounded when the environment's ``run_in_thread`` is true.
        annotations: MCP tool annotations (``{"readOnlyHint": True}``, ``title``, ...).
        grades: the tool grades submitted work (RFC 0015): ``True``, or ``{"argument": NAME,
            "language": "python" | "shell" | "sql" | "text"}`` naming the argument that holds
            the work. Writes the ``"openenv/grading"`` annotation; the episode's feedback level
            then applies to the tool's results (:attr:`openenv.Environment.grading`).

    The input schema comes from the parameters' type hints (pydantic) and the
    docstring's ``Args:`` section; the output schema from the return annotation.
    """

    if grades:
        annotations = {**(annotations or {}), **grading_annotation(grades)}

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__openenv_tool__ = _build(f, name, description, timeout_s, annotations)  # type: ignore[attr-defined]
        if grades and isinstance(grades, dict) and "argument" in grades:
            td = f.__openenv_tool__  # type: ignore[attr-defined]
            if grades["argument"] not in td.descriptor.input_schema.get("properties", {}):
                raise ValueError(
                    f"tool {td.descriptor.name!r}: grades names argument {grades['argument']!r}, not one of its"
                )
        return f

    return mark(fn) if fn is not None else mark


def collect_tools(cls: type) -> dict[str, ToolDef]:
    """The tools of an environment class, in definition order (base classes first)."""
    tools: dict[str, ToolDef] = {}
    for klass in reversed(cls.__mro__):
        for attr in vars(klass).values():
            td = getattr(attr, "__openenv_tool__", None)
            if isinstance(td, ToolDef):
                tools[td.descriptor.name] = td
    return tools
