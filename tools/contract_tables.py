#!/usr/bin/env python3
"""The contract's tables as data (``proto/tables/*.json``), the bindings' declarations
(``*/openenv-binding.json``) and everything generated from them.

Stdlib only (``make generate`` and the tests import it from a bare checkout). What it writes,
from :func:`outputs`:

* ``python/src/openenv/_contract.py``: the tables as Python data (the runtime reads them:
  ``openenv.errors`` checks its classes against the error table, ``EnvError.retryable``);
* the tables of ``docs/protocol.md`` between ``<!-- generated:NAME -->`` and
  ``<!-- /generated:NAME -->`` markers (the prose around them stays hand-written);
* the bindings matrix of ``docs/bindings.md``, from the declarations.

:func:`load` validates the data and says what is wrong with which row; ``tools/generate.py``
writes :func:`outputs` (``--check`` compares them). On its own:
``python tools/contract_tables.py [--check]`` (format: proto/tables/README.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TABLES = ROOT / "proto" / "tables"
DECLARATION = "openenv-binding.json"
PY_MODULE = ROOT / "python" / "src" / "openenv" / "_contract.py"
PROTOCOL_MD = ROOT / "docs" / "protocol.md"
BINDINGS_MD = ROOT / "docs" / "bindings.md"

STATUSES = ("NOT_STARTED", "RUNNING", "TERMINATED", "TRUNCATED", "ABORTED")
DELIVERY = {
    "in_band": "in band",
    "stream_status": "stream status",
    "both": "in band; stream status",
    "local": "client-side",
}
FATAL = ("no", "yes", "some")
SCOPES = ("core", "server", "environment", "client")
_MINOR = re.compile(r"1\.(0|[1-9][0-9]*)")
_RFC = re.compile(r"[0-9]{4}")


class TableError(ValueError):
    """The data breaks a rule of proto/tables/README.md; the message names the file and row."""


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TableError(f"{path.relative_to(ROOT)}: missing") from None
    except json.JSONDecodeError as e:
        raise TableError(f"{path.relative_to(ROOT)}: not JSON: {e}") from None


def _need(row: Mapping[str, Any], keys: Iterable[str], where: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise TableError(f"{where}: missing {', '.join(missing)}")


def minor_key(version: str) -> tuple[int, int]:
    """``"1.3"`` -> ``(1, 3)``."""
    major, minor = version.split(".")
    return int(major), int(minor)


def load() -> dict[str, Any]:
    """The three tables, validated: ``{"errors": [...], "sessions": {...}, "features": {...}}``."""
    errors = _read(TABLES / "errors.json")
    sessions = _read(TABLES / "sessions.json")
    features = _read(TABLES / "features.json")
    names, numbers, classes = set(), set(), set()
    for i, row in enumerate(errors.get("codes", [])):
        where = f"proto/tables/errors.json codes[{i}]"
        keys = ("name", "number", "class", "summary", "since", "rfc", "delivery", "fatal", "retryable", "ws_code")
        _need(row, keys, where)
        where += f" ({row['name']})"
        if not isinstance(row.get("ws_code", 0), str | None):
            raise TableError(f"{where}: ws_code must be a WSErrorCode name or null (no frame)")
        if row["delivery"] not in DELIVERY:
            raise TableError(f"{where}: delivery {row['delivery']!r} is not one of {', '.join(DELIVERY)}")
        if row["fatal"] not in FATAL:
            raise TableError(f"{where}: fatal {row['fatal']!r} is not one of {', '.join(FATAL)}")
        if not isinstance(row["retryable"], bool):
            raise TableError(f"{where}: retryable must be true or false")
        if not _MINOR.fullmatch(row["since"]) or not _RFC.fullmatch(row["rfc"]):
            raise TableError(f"{where}: since must be 1.MINOR and rfc four digits")
        subs = [s["class"] for s in row.get("subclasses", [])]
        for key, seen, value in (("name", names, [row["name"]]), ("number", numbers, [row["number"]])):
            if value[0] in seen:
                raise TableError(f"{where}: duplicate {key} {value[0]!r}")
            seen.add(value[0])
        for c in (row["class"], *subs):
            if c in classes:
                raise TableError(f"{where}: duplicate class {c!r}")
            classes.add(c)
    if not names:
        raise TableError("proto/tables/errors.json: no codes")
    code_names = names
    for i, t in enumerate(sessions.get("episode_transitions", [])):
        where = f"proto/tables/sessions.json episode_transitions[{i}]"
        _need(t, ("from", "event", "auto_reset", "to", "answer", "step_count"), where)
        bad = [s for s in t["from"] if s not in STATUSES]
        if bad or t["to"] not in (*STATUSES, "same"):
            raise TableError(f"{where}: unknown status {(bad or [t['to']])[0]!r}")
        if t["event"] not in sessions.get("events", {}):
            raise TableError(f"{where}: event {t['event']!r} is not described in events")
        for a in t["answer"].split("|"):
            if a not in ("time_step", "reset_time_step", "state") and a not in code_names:
                raise TableError(f"{where}: answer {a!r} is neither an answer kind nor an error code")
        if t["step_count"] not in ("0", "+1", "same"):
            raise TableError(f"{where}: step_count {t['step_count']!r} is not 0, +1 or same")
    kinds_seen: set[str] = set()
    for i, r in enumerate(sessions.get("request_rules", [])):
        for k in r["requests"]:
            if k in kinds_seen:
                raise TableError(f"proto/tables/sessions.json request_rules[{i}]: {k!r} is in another row")
            kinds_seen.add(k)
        for side in ("awaiting_handshake", "open"):
            rule, where = r[side], f"proto/tables/sessions.json request_rules[{i}].{side}"
            if ("error" in rule) == ("answer" in rule):
                raise TableError(f"{where}: give either error (with fatal) or answer")
            if "error" in rule and (rule["error"] not in code_names or not isinstance(rule.get("fatal"), bool)):
                raise TableError(f"{where}: unknown code {rule['error']!r}, or fatal not true/false")
            if "answer" in rule and rule["answer"] not in ("own", "episode"):
                raise TableError(f"{where}: answer {rule['answer']!r} is not own or episode")
    ids, fields, kinds, rpcs = set(), set(), set(), set()
    for i, f in enumerate(features.get("features", [])):
        where = f"proto/tables/features.json features[{i}]"
        _need(f, ("id", "title", "rfc", "minor", "scope", "advertised", "capabilities", "requests", "rpcs"), where)
        where += f" ({f['id']})"
        if f["id"] in ids:
            raise TableError(f"{where}: duplicate id")
        ids.add(f["id"])
        if f["minor"] is not None and not _MINOR.fullmatch(f["minor"]):
            raise TableError(f"{where}: minor {f['minor']!r} is not 1.MINOR (or null: no wire change)")
        if f["rfc"] is not None and not _RFC.fullmatch(f["rfc"]):
            raise TableError(f"{where}: rfc {f['rfc']!r} is not four digits")
        if f["scope"] not in SCOPES:
            raise TableError(f"{where}: scope {f['scope']!r} is not one of {', '.join(SCOPES)}")
        adv = f["advertised"]
        if adv is not None and (adv.get("field") not in f["capabilities"] or not isinstance(adv.get("min"), int)):
            raise TableError(f"{where}: advertised must name one of its own capabilities and an integer min")
        for key, seen in (("capabilities", fields), ("requests", kinds), ("rpcs", rpcs)):
            for name in f[key]:
                if name in seen:
                    raise TableError(f"{where}: {key} {name!r} is already in another row")
                seen.add(name)
    for h in features.get("harness_only", []):
        if h not in fields:
            raise TableError(f"proto/tables/features.json harness_only: {h!r} is not a capability of any row")
    return {"errors": errors["codes"], "sessions": sessions, "features": features}


def protocol_version(tables: Mapping[str, Any]) -> str:
    """The protocol's version: the newest minor of the feature matrix."""
    minors = [f["minor"] for f in tables["features"]["features"] if f["minor"] is not None]
    return max(minors, key=minor_key)


def declaration_paths() -> list[Path]:
    """Every binding's declaration: ``<top-level dir>/openenv-binding.json``."""
    return sorted(ROOT.glob(f"*/{DECLARATION}"))


def load_declaration(path: Path, tables: Mapping[str, Any]) -> dict[str, Any]:
    """One declaration, validated against the feature matrix."""
    return check_declaration(_read(path), str(path.relative_to(ROOT)), tables)


def check_declaration(decl: Any, where: str, tables: Mapping[str, Any]) -> dict[str, Any]:
    """``decl`` (a decoded declaration), validated against the feature matrix; ``where`` names
    it in errors."""
    if not isinstance(decl, dict):
        raise TableError(f"{where}: expected a JSON object")
    _need(decl, ("binding", "language", "package", "path", "protocol_version", "features", "transports", "tls"), where)
    feats = {f["id"]: f for f in tables["features"]["features"]}
    transports = {t["id"] for t in tables["features"]["transports"]}
    if not _MINOR.fullmatch(decl["protocol_version"]):
        raise TableError(f"{where}: protocol_version {decl['protocol_version']!r} is not 1.MINOR")
    if minor_key(decl["protocol_version"]) > minor_key(protocol_version(tables)):
        raise TableError(f"{where}: protocol_version {decl['protocol_version']} is newer than the contract's")
    unknown = [f for f in decl["features"] if f not in feats]
    if unknown:
        raise TableError(f"{where}: unknown features {unknown} (proto/tables/features.json ids: {sorted(feats)})")
    missing_core = [f for f, row in feats.items() if row["scope"] == "core" and f not in decl["features"]]
    if missing_core:
        raise TableError(f"{where}: every binding implements {missing_core}")
    for side in ("client", "server"):
        bad = [t for t in decl["transports"].get(side, []) if t not in transports]
        if bad:
            raise TableError(f"{where}: transports.{side}: unknown {bad} (known: {sorted(transports)})")
    for key in ("client", "server", "mutual"):
        if not isinstance(decl["tls"].get(key), bool):
            raise TableError(f"{where}: tls.{key} must be true or false")
    return decl


# --------------------------------------------------------------------------- docs/protocol.md


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(name: str) -> str:
    return f"`{name}`"


def _answer(rule: Mapping[str, Any]) -> str:
    if "text" in rule:
        return str(rule["text"])
    return f"`{rule['error']}`, " + ("fatal." if rule["fatal"] else "not fatal.")


def _md_table(header: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _transition_answer(answer: str) -> str:
    words = {
        "time_step": "its time step",
        "reset_time_step": "the reset's time step (an auto-reset; the action is not applied)",
        "state": "`StateResponse`",
    }
    parts = answer.split("|")
    if all(a not in words for a in parts):  # error codes
        return " or ".join(f"`{a}`" for a in parts) + ", not fatal"
    return " or ".join(words.get(a, f"`{a}`") for a in parts)


def protocol_sections(tables: Mapping[str, Any]) -> dict[str, str]:
    """The generated tables of docs/protocol.md, by marker name."""
    s = tables["sessions"]
    statuses = {
        "session-states": _md_table(
            ["Session state", "Meaning"], ([_code(r["name"]), r["meaning"]] for r in s["session_states"])
        ),
        "episode-statuses": _md_table(
            ["`EpisodeStatus`", "Meaning", "A step…"],
            ([_code(f"EPISODE_STATUS_{r['name']}"), r["meaning"], r["step"]] for r in s["episode_statuses"]),
        ),
        "episode-transitions": _md_table(
            ["From", "Event", "`auto_reset`", "To", "Answer", "`step_count`"],
            (
                [
                    "any" if len(t["from"]) == len(STATUSES) else ", ".join(_code(x) for x in t["from"]),
                    s["events"][t["event"]],
                    "—" if t["auto_reset"] is None else ("true" if t["auto_reset"] else "false"),
                    "unchanged" if t["to"] == "same" else _code(t["to"]),
                    _transition_answer(t["answer"]),
                    {"0": "0", "+1": "+1", "same": "unchanged"}[t["step_count"]],
                ]
                for t in s["episode_transitions"]
            ),
        ),
        "request-rules": _md_table(
            ["Request", "`AWAITING_HANDSHAKE`", "`OPEN`"],
            (
                [
                    ", ".join(_code(k) for k in r["requests"]) if r["requests"] != [""] else "no `kind` set",
                    _answer(r["awaiting_handshake"]),
                    _answer(r["open"]),
                ]
                for r in s["request_rules"]
            ),
        ),
    }
    errors = tables["errors"]
    statuses["error-table"] = _md_table(
        ["Code", "When", "Fatal", "Delivered", "Retryable", "Bridge"],
        (
            [
                f"`{e['name']}` ({e['number']})",
                e["when"],
                e["fatal_text"],
                DELIVERY[e["delivery"]],
                ("yes" if e["retryable"] else "no") + (f": {e['retry']}" if e.get("retry") else ""),
                e["bridge"],
            ]
            for e in errors
        ),
    )
    statuses["error-classes"] = _md_table(
        ["Class", "Code"],
        ([_code(e["class"]), _code(e["name"])] for e in errors),
    )
    statuses["features"] = _md_table(
        ["Minor", "RFC", "Feature", "`Capabilities` fields", "Request kinds, RPCs"],
        (
            [
                f["minor"] or "— (no wire change)",
                f"[{f['rfc']}](rfcs/{_rfc_file(f['rfc'])})" if f["rfc"] else "—",
                f"{f['title']} (`{f['id']}`)",
                ", ".join(_code(c) for c in f["capabilities"]) or "—",
                ", ".join([*(_code(k) for k in f["requests"]), *(f"`{r}` (RPC)" for r in f["rpcs"])]) or "—",
            ]
            for f in tables["features"]["features"]
        ),
    )
    return statuses


def _rfc_file(number: str) -> str:
    found = sorted((ROOT / "docs" / "rfcs").glob(f"{number}-*.md"))
    return found[0].name if found else f"{number}.md"


_MARKED = re.compile(r"(<!-- generated:([a-z-]+) [^>]*-->\n)(.*?)(\n<!-- /generated:\2 -->)", re.DOTALL)


def apply_sections(text: str, sections: Mapping[str, str], where: str) -> str:
    """``text`` with every ``<!-- generated:NAME ... -->`` ... ``<!-- /generated:NAME -->`` block
    replaced by ``sections[NAME]``; every section must have exactly one block."""
    seen: list[str] = []

    def sub(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in sections:
            raise TableError(f"{where}: no generated section named {name!r}")
        seen.append(name)
        return m.group(1) + sections[name] + m.group(4)

    out = _MARKED.sub(sub, text)
    missing = sorted(set(sections) - set(seen))
    dup = sorted({n for n in seen if seen.count(n) > 1})
    if missing or dup:
        raise TableError(f"{where}: generated sections missing {missing}, repeated {dup}")
    return out


# --------------------------------------------------------------------------- docs/bindings.md


def bindings_section(tables: Mapping[str, Any], decls: list[dict[str, Any]]) -> str:
    """The matrix of docs/bindings.md: one column per binding, from the declarations."""
    header = ["", *(f"{d['language']} ([`{d['path']}`](../{d['path']}))" for d in decls)]
    rows = [["Package", *(d["package"] for d in decls)]]
    rows.append(["**Protocol version**", *(f"**{d['protocol_version']}**" for d in decls)])
    for f in tables["features"]["features"]:
        label = f"{f['title']} (RFC {f['rfc']}, {f['minor'] or '1.x'})" if f["rfc"] else f["title"]
        cells = []
        for d in decls:
            if f["id"] not in d["features"]:
                cells.append("—")
            elif f["minor"] is not None and minor_key(f["minor"]) > minor_key(d["protocol_version"]):
                cells.append(f"yes (ahead of its {d['protocol_version']})")
            else:
                cells.append("yes")
        rows.append([label, *cells])
    for t in tables["features"]["transports"]:
        cells = []
        for d in decls:
            sides = [s for s in ("client", "server") if t["id"] in d["transports"].get(s, [])]
            cells.append(" and ".join(sides) if sides else "—")
        rows.append([f"Transport: {t['title']}", *cells])
    tls = []
    for d in decls:
        sides = [s for s in ("client", "server") if d["tls"][s]]
        tls.append((" and ".join(sides) + (", mutual" if d["tls"]["mutual"] else "")) if sides else "—")
    rows.append(["TLS", *tls])
    return _md_table(header, rows)


# --------------------------------------------------------------------------- openenv/_contract.py


def _tuple(items: Iterable[str]) -> str:
    items = list(items)
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _opt(value: str | None) -> str:
    return "None" if value is None else _str(value)


def _call(name: str, args: list[str], indent: str = "    ") -> list[str]:
    """``name(args),`` as ruff formats it: on one line when it fits in 120 columns, else one
    argument per line (and a tuple argument that does not fit, one item per line)."""
    line = f"{indent}{name}({', '.join(args)}),"
    if len(line) <= 120:
        return [line]
    out = [f"{indent}{name}("]
    for a in args:
        inner = indent + "    "
        if len(inner + a + ",") <= 120 or not a.startswith("("):
            out.append(f"{inner}{a},")
        else:
            items = [x.strip() for x in a[1:-1].split(", ") if x.strip().rstrip(",")]
            out += [f"{inner}(", *(f"{inner}    {x.rstrip(',')}," for x in items), f"{inner}),"]
    return [*out, f"{indent}),"]


def python_module(tables: Mapping[str, Any]) -> str:
    """``python/src/openenv/_contract.py``: the tables as typed Python data."""
    out = [
        "# Generated by tools/generate.py from proto/tables/*.json (tools/contract_tables.py): do not edit.",
        '"""The contract\'s tables (``proto/tables/``) as Python data, generated by ``make generate``.',
        "",
        "``openenv.errors`` checks its classes against :data:`ERRORS` and answers",
        "``EnvError.retryable`` from it; the tests check the runtime's state machine against",
        ":data:`EPISODE_TRANSITIONS` and ``openenv.PROTOCOL_VERSION`` against :data:`PROTOCOL_VERSION`.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Final, NamedTuple",
        "",
        "",
        "class ErrorRow(NamedTuple):",
        '    """A row of the error table (docs/protocol.md §5.2)."""',
        "",
        "    name: str",
        "    number: int",
        "    cls: str",
        "    subclasses: tuple[str, ...]",
        "    since: str",
        "    delivery: str",
        "    fatal: str",
        "    retryable: bool",
        "",
        "",
        "class Transition(NamedTuple):",
        '    """A transition of the episode state machine (docs/protocol.md §3.1)."""',
        "",
        "    sources: tuple[str, ...]",
        "    event: str",
        "    auto_reset: bool | None",
        "    to: str",
        "    answer: str",
        "    step_count: str",
        "",
        "",
        "class Feature(NamedTuple):",
        '    """A row of the feature matrix (docs/protocol.md §10)."""',
        "",
        "    id: str",
        "    rfc: str | None",
        "    minor: str | None",
        "    scope: str",
        "    capabilities: tuple[str, ...]",
        "    requests: tuple[str, ...]",
        "    rpcs: tuple[str, ...]",
        "",
        "",
        f'PROTOCOL_VERSION: Final = "{protocol_version(tables)}"',
        '"""The newest minor of the feature matrix."""',
        "",
        "ERRORS: Final[tuple[ErrorRow, ...]] = (",
    ]
    for e in tables["errors"]:
        subs = _tuple(_str(s["class"]) for s in e.get("subclasses", []))
        args = [_str(e["name"]), str(e["number"]), _str(e["class"]), subs, _str(e["since"])]
        out += _call("ErrorRow", [*args, _str(e["delivery"]), _str(e["fatal"]), str(e["retryable"])])
    out += [")", "", "EPISODE_TRANSITIONS: Final[tuple[Transition, ...]] = ("]
    for t in tables["sessions"]["episode_transitions"]:
        args = [_tuple(_str(x) for x in t["from"]), _str(t["event"]), str(t["auto_reset"]), _str(t["to"])]
        out += _call("Transition", [*args, _str(t["answer"]), _str(t["step_count"])])
    out += [")", "", "FEATURES: Final[tuple[Feature, ...]] = ("]
    for f in tables["features"]["features"]:
        args = [_str(f["id"]), _opt(f["rfc"]), _opt(f["minor"]), _str(f["scope"])]
        out += _call("Feature", [*args, *(_tuple(_str(x) for x in f[k]) for k in ("capabilities", "requests", "rpcs"))])
    harness = _tuple(f'"{h}"' for h in tables["features"].get("harness_only", []))
    out += [")", "", f"HARNESS_ONLY: Final[tuple[str, ...]] = {harness}", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- all outputs


def outputs() -> dict[Path, str]:
    """Every file generated from the tables and declarations, with its expected content."""
    tables = load()
    decls = [load_declaration(p, tables) for p in declaration_paths()]
    return {
        PY_MODULE: python_module(tables),
        PROTOCOL_MD: apply_sections(
            PROTOCOL_MD.read_text(encoding="utf-8"), protocol_sections(tables), "docs/protocol.md"
        ),
        BINDINGS_MD: apply_sections(
            BINDINGS_MD.read_text(encoding="utf-8"), {"bindings": bindings_section(tables, decls)}, "docs/bindings.md"
        ),
    }


def stale() -> list[Path]:
    """The generated files whose committed content differs from :func:`outputs`."""
    return [p for p, text in outputs().items() if not p.exists() or p.read_text(encoding="utf-8") != text]


def write() -> list[Path]:
    """Write every output that changed; return them."""
    changed = stale()
    for path, text in outputs().items():
        if path in changed:
            path.write_text(text, encoding="utf-8")
    return changed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a generated file is stale")
    ns = ap.parse_args()
    try:
        if ns.check:
            bad = stale()
            for p in bad:
                print(f"stale: {p.relative_to(ROOT)} (run `make generate`)", file=sys.stderr)
            return 1 if bad else 0
        for p in write():
            print("wrote", p.relative_to(ROOT))
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
