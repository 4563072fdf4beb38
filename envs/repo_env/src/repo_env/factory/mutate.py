"""Procedural, AST-aware bug synthesis: the places in a module where a bug can be planted, and
the source text with it planted.

Every mutation edits the file's text at the exact place the AST names (``lineno``/``col_offset``
of the nodes), so a bug is a small diff in the package's own formatting, never a reformatted
file. The operators, each a family of bugs seen in real code:

========================  ==================================================================
``operator``              ``+``/``-``, ``*``/``/``, ``//``/``/``, ``%``, ``<<``/``>>``, ``&``/``|``
``condition``             ``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``in``/``not in``,
                          ``is``/``is not``, ``and``/``or``, ``if c`` -> ``if not (c)``
``off_by_one``            an integer constant ``n`` in an index, a slice, ``range()``, a
                          comparison or an addition, made ``n + 1`` or ``n - 1``
``removed_branch``        an ``if`` (without ``else``) or an ``elif``/``else`` branch removed
``swapped_arguments``     the first two positional arguments of a call swapped
``wrong_default``         a parameter's default: ``True``/``False`` flipped, a number off by one
``exception_path``        a ``raise`` under an ``if`` removed (the error case falls through),
                          or an ``except`` clause's body made to re-raise
========================  ==================================================================

Only code inside a function is mutated (module-level code runs at import, so a bug there breaks
every test and says nothing about one behaviour). :func:`sites` lists every candidate of a file in
a stable order; :func:`apply` plants one or more (the harder tier combines two).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import itertools
from collections.abc import Iterator, Sequence

__all__ = ["OPERATORS", "Mutation", "apply", "enclosing_functions", "sites"]

OPERATORS = (
    "operator",
    "condition",
    "off_by_one",
    "removed_branch",
    "swapped_arguments",
    "wrong_default",
    "exception_path",
)

_BINOP_SWAP: dict[type[ast.operator], tuple[str, str]] = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "/"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "/"),
    ast.Mod: ("%", "//"),
    ast.LShift: ("<<", ">>"),
    ast.RShift: (">>", "<<"),
    ast.BitAnd: ("&", "|"),
    ast.BitOr: ("|", "&"),
}
_CMP_SWAP: dict[type[ast.cmpop], tuple[str, str]] = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
}


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One planted bug: in ``path``, the text between (``line``, ``col``) and (``end_line``,
    ``end_col``) (1-based lines, 0-based columns, as the AST gives them) becomes ``new``.
    ``function`` is the qualified name of the function it is in (``Class.method``,
    ``outer.<locals>.inner``), ``operator`` one of :data:`OPERATORS`, ``what`` a short
    description for the factory's records (never shown to an agent)."""

    path: str
    operator: str
    function: str
    line: int
    col: int
    end_line: int
    end_col: int
    old: str
    new: str
    what: str

    @property
    def key(self) -> str:
        """A stable id of the mutation (its file, place and replacement)."""
        h = hashlib.sha256(f"{self.path}:{self.line}:{self.col}:{self.end_line}:{self.end_col}:{self.new}".encode())
        return h.hexdigest()[:12]

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Mutation:
        return cls(**d)  # type: ignore[arg-type]


def _offsets(text: str) -> list[int]:
    """The offset of the start of each line (index 0 is line 1)."""
    out, pos = [0], 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        out.append(pos)
    return out


class _Sites(ast.NodeVisitor):
    def __init__(self, path: str, text: str) -> None:
        self.path, self.text = path, text
        self.lines = text.splitlines(keepends=True)
        self.starts = _offsets(text)
        self.stack: list[str] = []
        self.in_function = 0
        self.found: list[Mutation] = []

    # -- positions (the AST's columns are UTF-8 byte offsets)

    def _pos(self, line: int, col: int) -> int:
        src = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return self.starts[line - 1] + len(src.encode()[:col].decode(errors="replace"))

    def _segment(self, line: int, col: int, end_line: int, end_col: int) -> str:
        return self.text[self._pos(line, col) : self._pos(end_line, end_col)]

    def _add(self, op: str, line: int, col: int, end_line: int, end_col: int, new: str, what: str) -> None:
        if not self.in_function:
            return
        old = self._segment(line, col, end_line, end_col)
        if old == new:
            return
        names = self.stack[:-1] if self.stack and self.stack[-1] == "<locals>" else self.stack
        self.found.append(Mutation(self.path, op, ".".join(names), line, col, end_line, end_col, old, new, what))

    def _between(self, a: ast.AST, b: ast.AST, old: str, new: str, op: str, what: str) -> None:
        """Replace the operator token ``old`` in the text between node ``a``'s end and ``b``'s start."""
        gap = self._segment(a.end_lineno or 0, a.end_col_offset or 0, b.lineno, b.col_offset)
        # the token, not a longer one holding it ("<" in "<=", "in" in "not in")
        idx = _find_token(gap, old)
        if idx < 0:
            return
        start = self._pos(a.end_lineno or 0, a.end_col_offset or 0) + idx
        line = self.text.count("\n", 0, start) + 1
        col = len(self.text[self.starts[line - 1] : start].encode())
        end_col = col + len(old.encode())
        self._add(op, line, col, line, end_col, new, what)

    # -- scopes

    def _scope(self, node: ast.AST, name: str, function: bool) -> None:
        self.stack.append(name)
        if function:
            self.in_function += 1
            self.stack.append("<locals>")
        self.generic_visit(node)
        if function:
            self.in_function -= 1
            self.stack.pop()
        self.stack.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._defaults(node)
        self._scope(node, node.name, True)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]  # noqa: N815 -- ast's visitor name

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scope(node, node.name, False)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.generic_visit(node)

    # -- the operators

    def _defaults(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stack.append(node.name)
        self.in_function += 1
        for d in [*node.args.defaults, *(k for k in node.args.kw_defaults if k is not None)]:
            if isinstance(d, ast.Constant) and d.end_lineno is not None and d.end_col_offset is not None:
                v = d.value
                if isinstance(v, bool):
                    new = repr(not v)
                elif isinstance(v, int) and not isinstance(v, bool):
                    new = repr(v + 1)
                else:
                    continue
                self._add(
                    "wrong_default",
                    d.lineno,
                    d.col_offset,
                    d.end_lineno,
                    d.end_col_offset,
                    new,
                    f"default {v!r} -> {new}",
                )
        self.in_function -= 1
        self.stack.pop()

    def visit_BinOp(self, node: ast.BinOp) -> None:
        swap = _BINOP_SWAP.get(type(node.op))
        if swap and not _is_string_format(node):
            self._between(node.left, node.right, swap[0], swap[1], "operator", f"{swap[0]} -> {swap[1]}")
        if isinstance(node.op, (ast.Add, ast.Sub)) and _small_int(node.right):
            self._off_by_one(node.right)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        left: ast.AST = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            swap = _CMP_SWAP.get(type(op))
            if swap:
                self._between(left, right, swap[0], swap[1], "condition", f"{swap[0]} -> {swap[1]}")
            if _small_int(right) and isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
                self._off_by_one(right)
            left = right
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        self._between(node.values[0], node.values[1], old, new, "condition", f"{old} -> {new}")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        s = node.slice
        for part in (s.lower, s.upper) if isinstance(s, ast.Slice) else (s,):
            if part is not None and _small_int(part):
                self._off_by_one(part)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Name) and f.id == "range":
            for a in node.args:
                if _small_int(a):
                    self._off_by_one(a)
        pos = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(pos) >= 2 and len(node.args) == len(pos):
            a, b = pos[0], pos[1]
            ta = self._segment(a.lineno, a.col_offset, a.end_lineno or 0, a.end_col_offset or 0)
            tb = self._segment(b.lineno, b.col_offset, b.end_lineno or 0, b.end_col_offset or 0)
            if ta != tb and "\n" not in ta + tb and a.lineno == b.end_lineno:
                mid = self._segment(a.end_lineno or 0, a.end_col_offset or 0, b.lineno, b.col_offset)
                self._add(
                    "swapped_arguments",
                    a.lineno,
                    a.col_offset,
                    b.end_lineno or 0,
                    b.end_col_offset or 0,
                    tb + mid + ta,
                    f"arguments {ta} and {tb} swapped",
                )
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        t = node.test
        if t.end_lineno is not None and t.end_col_offset is not None and t.lineno == t.end_lineno:
            cond = self._segment(t.lineno, t.col_offset, t.end_lineno, t.end_col_offset)
            if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
                inner = t.operand
                new = self._segment(inner.lineno, inner.col_offset, inner.end_lineno or 0, inner.end_col_offset or 0)
            else:
                new = f"not ({cond})"
            self._add("condition", t.lineno, t.col_offset, t.end_lineno, t.end_col_offset, new, "condition negated")
        self._remove_branch(node)
        for stmt in node.body:
            if isinstance(stmt, ast.Raise) and stmt.end_lineno is not None:
                self._replace_statement(stmt, "pass", "exception_path", "raise removed")
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        body = node.body
        if body and not any(isinstance(s, ast.Raise) for s in body) and body[0].end_lineno is not None:
            first = body[0]
            line = self.lines[first.lineno - 1]
            indent = line[: len(line) - len(line.lstrip())]
            if first.col_offset == len(indent.encode()) and first.lineno != node.lineno:
                self._add(
                    "exception_path",
                    first.lineno,
                    0,
                    first.lineno,
                    0,
                    f"{indent}raise\n",
                    "except clause re-raises",
                )
        self.generic_visit(node)

    # -- helpers

    def _off_by_one(self, node: ast.expr) -> None:
        assert isinstance(node, ast.Constant)
        v = node.value
        for new in (v + 1, v - 1):
            if new < 0 and v >= 0:
                continue
            self._add(
                "off_by_one",
                node.lineno,
                node.col_offset,
                node.end_lineno or 0,
                node.end_col_offset or 0,
                repr(new),
                f"{v} -> {new}",
            )

    def _replace_statement(self, stmt: ast.stmt, new: str, op: str, what: str) -> None:
        line = self.lines[stmt.lineno - 1]
        if (
            stmt.end_lineno is None
            or line[: len(line) - len(line.lstrip())].encode() != line.encode()[: stmt.col_offset]
        ):
            return
        self._add(op, stmt.lineno, stmt.col_offset, stmt.end_lineno, stmt.end_col_offset or 0, new, what)

    def _remove_branch(self, node: ast.If) -> None:
        """``if c: body`` (no else) -> ``pass``; ``... else: body`` -> no else branch."""
        first = self.lines[node.lineno - 1]
        is_elif = not first.lstrip().startswith("if")
        if node.end_lineno is None:
            return
        if not node.orelse and not is_elif and not all(isinstance(s, ast.Raise) for s in node.body):
            indent = first[: len(first) - len(first.lstrip())]
            if len(indent.encode()) == node.col_offset:
                self._add(
                    "removed_branch", node.lineno, 0, node.end_lineno + 1, 0, f"{indent}pass\n", "if statement removed"
                )
        elif node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
            # the else branch: from the line after the body to the end of the if statement
            body_end = node.body[-1].end_lineno or 0
            else_line = self.lines[body_end] if body_end < len(self.lines) else ""
            if else_line.strip() == "else:" and node.end_lineno > body_end + 1:
                self._add("removed_branch", body_end + 1, 0, node.end_lineno + 1, 0, "", "else branch removed")


def _find_token(gap: str, token: str) -> int:
    """The index of ``token`` in ``gap`` as an operator of its own (not part of a longer one)."""
    i = gap.find(token)
    while i >= 0:
        before = gap[i - 1] if i else " "
        after = gap[i + len(token)] if i + len(token) < len(gap) else " "
        word = token[0].isalpha()
        if word:
            ok = not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_")
            if token == "in" and gap[:i].rstrip().endswith("not"):
                ok = False
            if token == "is" and gap[i:].startswith("is not"):
                ok = False
        else:
            ok = before not in "<>=!*/%&|^" and after not in "<>=*/"
        if ok and "#" not in gap[:i]:
            return i
        i = gap.find(token, i + 1)
    return -1


def _small_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 64


def _is_string_format(node: ast.BinOp) -> bool:
    return (
        isinstance(node.op, ast.Mod)
        and isinstance(node.left, (ast.Constant, ast.JoinedStr))
        and isinstance(getattr(node.left, "value", None), str)
    )


def sites(path: str, text: str) -> list[Mutation]:
    """Every mutation of the module ``text`` (at ``path``), in a stable order; [] when it does not
    parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    v = _Sites(path, text)
    v.visit(tree)
    seen: set[tuple[int, int, int, int, str]] = set()
    out = []
    for m in v.found:
        k = (m.line, m.col, m.end_line, m.end_col, m.new)
        if k not in seen:
            seen.add(k)
            out.append(m)
    return out


def apply(text: str, mutations: Sequence[Mutation]) -> str:
    """``text`` with every mutation planted (they must not overlap); ValueError when one's old
    text is not where it says, or the result does not parse."""
    starts = _offsets(text)
    lines = text.splitlines(keepends=True)

    def pos(line: int, col: int) -> int:
        if line - 1 >= len(lines):
            return len(text)
        return starts[line - 1] + len(lines[line - 1].encode()[:col].decode(errors="replace"))

    spans = sorted(((pos(m.line, m.col), pos(m.end_line, m.end_col), m) for m in mutations), key=lambda s: s[0])
    for (_, e1, _), (s2, _, _) in itertools.pairwise(spans):
        if s2 < e1:
            raise ValueError("overlapping mutations")
    out = text
    for s, e, m in reversed(spans):
        if out[s:e] != m.old:
            raise ValueError(f"{m.path}:{m.line}: the text to replace is not there")
        out = out[:s] + m.new + out[e:]
    ast.parse(out)
    return out


def enclosing_functions(mutations: Sequence[Mutation]) -> Iterator[str]:
    """The distinct functions the mutations touch."""
    return iter(dict.fromkeys(m.function for m in mutations))
