"""Snapshots of a session (RFC 0006): the environment's part, the runtime's part, sealed.

A snapshot (``openenv.v1.Snapshot``) carries the environment's own state, as its
:meth:`~openenv.Environment.snapshot` hook encoded it, and the runtime's: episode id, step
count, episode status and the per-episode state of the session's rubric. A restored session
therefore continues exactly where the snapshot was taken.

Snapshots are sealed with an HMAC-SHA256 under the server's snapshot key, and a server
restores only snapshots whose seal verifies. The key is ``OPENENV_SNAPSHOT_KEY`` (UTF-8 text)
when set, so several replicas of one environment can restore each other's snapshots, and
otherwise random per process.

The seal says which server made a snapshot; it is not what keeps a snapshot from running code
on the server. A key is shared by a whole fleet and may leak, so the bytes of a snapshot are
read as untrusted input whoever sealed them: the default hooks and the rubric's state are
pickles written by :func:`dumps` and read by :func:`loads`, a restricted unpickler that
resolves only the globals a :class:`SnapshotPolicy` admits (the value types of
:data:`SAFE_GLOBALS`, the classes the environment's own packages define, and what the class
names in :attr:`~openenv.Environment.snapshot_globals`). Anything else (``os.system``,
``builtins.eval``, ``builtins.getattr``, ``subprocess.Popen``, a function of any module) is
refused before it is imported or called, and the restore is answered ``INVALID_ARGUMENT``.

Nothing here does I/O or knows the session types: :mod:`openenv.runtime.session` calls it.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import io
import os
import pickle
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from openenv.errors import FailedPrecondition, InvalidArgument
from openenv.runtime.rubrics.base import Rubric
from openenv.v1 import environment_pb2

__all__ = [
    "FORMAT",
    "KEY_ENV",
    "SAFE_GLOBALS",
    "RefusedGlobal",
    "SnapshotPolicy",
    "apply_rubric_state",
    "default_key",
    "dumps",
    "load_rubric_state",
    "loads",
    "policy",
    "restore_rubric",
    "rubric_state",
    "seal",
    "verify",
]

#: The snapshot format this runtime writes and reads (``Snapshot.format``).
FORMAT = 1
#: The environment variable holding a snapshot key shared by replicas.
KEY_ENV = "OPENENV_SNAPSHOT_KEY"

# Attributes of a rubric node that are wiring, not per-episode state.
_RUBRIC_SKIP = frozenset({"env", "_client", "_client_loop"})


def _pairs(table: Mapping[str, Iterable[str]]) -> frozenset[tuple[str, str]]:
    return frozenset((module, name) for module, names in table.items() for name in names)


_PATH_CLASSES = ("PurePath", "PurePosixPath", "PureWindowsPath", "Path", "PosixPath", "WindowsPath")

#: The globals (``(module, qualified name)``) a snapshot of any environment may name: value
#: types of the standard library, numpy's array, dtype, scalar and random generator
#: reconstruction (when numpy is installed; ``numpy.core`` is numpy 1's name of ``numpy._core``),
#: and the runtime's own value types. Each is a class, or a function that only builds such a
#: value; none imports, evaluates, opens or runs anything named by its arguments.
SAFE_GLOBALS: frozenset[tuple[str, str]] = _pairs(
    {
        "builtins": (
            "bool",
            "int",
            "float",
            "complex",
            "str",
            "list",
            "tuple",
            "dict",
            "set",
            "frozenset",
            "slice",
            "Ellipsis",
            "NotImplemented",
        ),
        "collections": ("OrderedDict", "defaultdict", "deque", "Counter", "ChainMap"),
        "datetime": ("date", "time", "datetime", "timedelta", "timezone"),
        "decimal": ("Decimal",),
        "fractions": ("Fraction",),
        "random": ("Random",),
        "uuid": ("UUID", "SafeUUID"),
        "re": ("_compile",),
        "types": ("SimpleNamespace",),
        "array": ("array", "_array_reconstructor"),
        "pathlib": _PATH_CLASSES,
        "pathlib._local": _PATH_CLASSES,  # Python 3.13's home of the path classes
        "numpy": ("dtype", "ndarray"),
        "numpy._core.multiarray": ("_reconstruct", "scalar"),
        "numpy.core.multiarray": ("_reconstruct", "scalar"),
        "numpy._core.numeric": ("_frombuffer",),
        "numpy.core.numeric": ("_frombuffer",),
        "numpy.random._pickle": ("__generator_ctor", "__randomstate_ctor", "__bit_generator_ctor"),
        "numpy.random._generator": ("Generator",),
        "numpy.random.mtrand": ("RandomState",),
        "numpy.random._mt19937": ("MT19937",),
        "numpy.random._pcg64": ("PCG64", "PCG64DXSM"),
        "numpy.random._philox": ("Philox",),
        "numpy.random._sfc64": ("SFC64",),
        "numpy.random.bit_generator": ("SeedSequence", "__pyx_unpickle_SeedSequence"),
        "openenv.protocol": ("EpisodeStatus", "SessionState", "StepResult"),
        "openenv.runtime.tools": ("CallToolAction", "CallToolObservation", "ToolResult"),
        "openenv.runtime.rubrics.base": ("Score",),
    }
)

# Never an environment's own package: the standard library's and the runtime's classes are
# admitted one by one (above), not by package.
_NOT_OWN = frozenset(sys.stdlib_module_names) | {"builtins", "openenv"}


class RefusedGlobal(pickle.PickleError):
    """A global (class or function, ``module.qualname``) that a :class:`SnapshotPolicy` does not
    admit: raised by :func:`dumps` for state that :func:`loads` would refuse."""

    def __init__(self, name: str, why: str = "") -> None:
        super().__init__(f"{name}{f' ({why})' if why else ''}")
        self.name = name
        """The global, as ``module.qualname``."""
        self.why = why
        """Why it was refused, beyond not being admitted (empty when not)."""


def _identifiers(text: str) -> bool:
    """A dotted name of identifiers (a module, or a qualified name given by the author)."""
    return all(p.isidentifier() for p in text.split("."))


def _qualname(text: str) -> bool:
    """A qualified name of identifiers, none of them a dunder name (``__init__``, ``__globals__``)."""
    return _identifiers(text) and not any(p.startswith("__") and p.endswith("__") for p in text.split("."))


class SnapshotPolicy:
    """The globals a snapshot of one environment class may name (:func:`policy` builds it).

    ``names``: exact ``(module, qualified name)`` pairs, any kind of object (:data:`SAFE_GLOBALS`
    and the class's ``snapshot_globals`` entries ``"module:qualname"``). ``packages``: packages
    whose classes are admitted: the top-level packages of the environment class and its bases
    (neither ``openenv`` nor the standard library), and ``snapshot_globals`` entries without a
    colon. A class of theirs is admitted when it is defined in the module named (not imported
    into it) and that module is already imported: a snapshot never makes a module of these
    packages run (a package's ``__main__``, a script). Their functions are not admitted: name
    them.
    """

    def __init__(self, names: Iterable[tuple[str, str]], packages: Iterable[str]) -> None:
        self.names = frozenset(names)
        """Admitted ``(module, qualified name)`` pairs."""
        self.packages = frozenset(packages)
        """Packages (and modules) whose own classes are admitted."""

    def __repr__(self) -> str:
        return f"SnapshotPolicy(packages={sorted(self.packages)}, {len(self.names)} names)"

    def _in_packages(self, module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in self.packages)

    def describe(self) -> str:
        """What is admitted, for error messages."""
        own = ", ".join(sorted(self.packages)) or "none"
        return (
            "a snapshot may name only the value types of openenv.runtime.snapshots.SAFE_GLOBALS, the classes "
            f"defined in the environment's own packages ({own}) and what its snapshot_globals names"
        )

    def admits(self, obj: Any) -> bool:
        """Whether ``obj`` (a class or function), pickled by reference, would be resolved by
        :meth:`find` (``dumps`` asks before writing it)."""
        module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(qualname, str):
            return False
        if (module, qualname) in self.names:
            return True
        return isinstance(obj, type) and self._in_packages(module) and _identifiers(module) and _qualname(qualname)

    def find(self, module: str, name: str) -> Any:
        """The object a pickle's global ``module``/``name`` names, when admitted; raises
        :class:`RefusedGlobal` otherwise, before importing anything outside the policy."""
        if (module, name) in self.names:
            try:
                obj: Any = importlib.import_module(module)
                for part in name.split("."):
                    obj = getattr(obj, part)
            except (ImportError, AttributeError) as e:
                raise RefusedGlobal(f"{module}.{name}", f"not available here: {type(e).__name__}: {e}") from None
            return obj
        if not (self._in_packages(module) and _identifiers(module) and _qualname(name)):
            raise RefusedGlobal(f"{module}.{name}")
        # Never imported on a snapshot's say-so: importing a module of a package runs it (a
        # package's __main__, a script). The classes of state were imported to be made.
        found: Any = sys.modules.get(module)
        if found is None:
            raise RefusedGlobal(f"{module}.{name}", f"{module} is not imported in this process")
        for part in name.split("."):
            # Namespaces' own dictionaries: no attribute hooks, no descriptors run.
            found = vars(found).get(part) if isinstance(found, types.ModuleType | type) else None
        if isinstance(found, type) and found.__module__ == module and found.__qualname__ == name:
            return found
        raise RefusedGlobal(f"{module}.{name}", f"not a class defined in {module}")


def _entry(entry: Any, cls: type) -> tuple[str, str] | str:
    if isinstance(entry, str):
        module, colon, qualname = entry.partition(":")
        if not _identifiers(module) or (colon and not _identifiers(qualname)):
            raise ValueError(f"{cls.__name__}.snapshot_globals: {entry!r} is not 'module:qualname' nor a package name")
        return (module, qualname) if colon else module
    mod, qual = getattr(entry, "__module__", None), getattr(entry, "__qualname__", None)
    if isinstance(mod, str) and isinstance(qual, str):
        return mod, qual
    raise TypeError(
        f"{cls.__name__}.snapshot_globals: {entry!r} is neither a class or function nor a 'module:qualname' string"
    )


_POLICIES: weakref.WeakKeyDictionary[type, SnapshotPolicy] = weakref.WeakKeyDictionary()


def policy(env_cls: type) -> SnapshotPolicy:
    """The :class:`SnapshotPolicy` of an environment class: :data:`SAFE_GLOBALS`, the classes of
    the top-level packages (or modules) defining the class and its bases (neither ``openenv``
    nor the standard library), and its ``snapshot_globals``. Raises ``ValueError`` or
    ``TypeError`` for a malformed entry."""
    cached = _POLICIES.get(env_cls)
    if cached is not None:
        return cached
    names, packages = set(SAFE_GLOBALS), set()
    for c in env_cls.__mro__:
        top = (getattr(c, "__module__", None) or "").partition(".")[0]
        if top and top not in _NOT_OWN:
            packages.add(top)
    for entry in getattr(env_cls, "snapshot_globals", ()) or ():
        e = _entry(entry, env_cls)
        if isinstance(e, str):
            packages.add(e)
        else:
            names.add(e)
    rules = _POLICIES[env_cls] = SnapshotPolicy(names, packages)
    return rules


class _NotState(Exception):
    """A rubric node inside a rubric attribute: tree structure, not per-episode state."""


class _Pickler(pickle.Pickler):
    """A pickler that refuses, by :class:`RefusedGlobal`, every class or function the policy
    would not resolve on the way back (and, for rubric state, rubric nodes)."""

    def __init__(self, file: io.BytesIO, rules: SnapshotPolicy, *, no_rubrics: bool) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._rules, self._no_rubrics = rules, no_rubrics

    def reducer_override(self, obj: Any) -> Any:
        # Called for every object but None, booleans and exact ints, floats, strings, bytes,
        # lists, tuples, dicts and sets, before its class's reduction: so for every class and
        # function the pickle will name.
        if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
            if not self._rules.admits(obj):
                module, qualname = getattr(obj, "__module__", "?"), getattr(obj, "__qualname__", repr(obj))
                raise RefusedGlobal(f"{module}.{qualname}")
        elif self._no_rubrics and isinstance(obj, Rubric):
            raise _NotState(obj.name)
        return NotImplemented


# What a pickle may name but never change nor fill: classes, functions, modules. (Without this,
# BUILD on a class would set its attributes: one forged restore changing the classes every
# session of the process uses.)
_INERT = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)
_BASE_DISPATCH: dict[int, Callable[[Any], None]] = dict(pickle._Unpickler.dispatch)


def _marked(u: Any) -> Any:
    """The object under the unpickler's topmost mark (what APPENDS, SETITEMS, ADDITEMS change)."""
    below = u.metastack[-1] if u.metastack else []
    return below[-1] if below else None


def _changing(op: str, target: Callable[[Any], Any]) -> Callable[[Any], None]:
    """The base loader of opcode ``op``, refused when the object it changes (``target``) is inert."""
    base = _BASE_DISPATCH[getattr(pickle, op)[0]]

    def load(u: Any) -> None:
        obj = target(u)
        if isinstance(obj, _INERT):
            name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"
            raise RefusedGlobal(name, f"the pickle would change it ({op})")
        base(u)

    return load


def _making(op: str, depth: int) -> Callable[[Any], None]:
    """The base loader of NEWOBJ(_EX), refused unless its class argument is a class."""
    base = _BASE_DISPATCH[getattr(pickle, op)[0]]

    def load(u: Any) -> None:
        if not isinstance(u.stack[-depth], type):
            raise pickle.UnpicklingError(f"the class argument of {op} is not a class")
        base(u)

    return load


class _Unpickler(pickle._Unpickler):
    """pickle's (pure Python) unpickler with every global (GLOBAL, STACK_GLOBAL, INST, EXT*)
    resolved by a policy, so nothing is imported or called that the policy does not admit; with
    the opcodes that change an object (BUILD, APPEND(S), SETITEM(S), ADDITEMS) refused on a
    class, function or module, and NEWOBJ on anything but a class. Out-of-band buffers and
    persistent ids are not accepted (the base class refuses them). The C unpickler offers no
    hook for the opcodes, hence the pure Python one (a few times slower; restores are rare)."""

    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = {
        **_BASE_DISPATCH,
        pickle.BUILD[0]: _changing("BUILD", lambda u: u.stack[-2]),
        pickle.APPEND[0]: _changing("APPEND", lambda u: u.stack[-2]),
        pickle.APPENDS[0]: _changing("APPENDS", _marked),
        pickle.SETITEM[0]: _changing("SETITEM", lambda u: u.stack[-3]),
        pickle.SETITEMS[0]: _changing("SETITEMS", _marked),
        pickle.ADDITEMS[0]: _changing("ADDITEMS", _marked),
        pickle.NEWOBJ[0]: _making("NEWOBJ", 2),
        pickle.NEWOBJ_EX[0]: _making("NEWOBJ_EX", 3),
    }

    def __init__(self, data: bytes, rules: SnapshotPolicy) -> None:
        super().__init__(io.BytesIO(data), fix_imports=False)
        self._rules = rules

    def find_class(self, module: str, name: str) -> Any:
        return self._rules.find(module, name)


def dumps(value: Any, env_cls: type) -> bytes:
    """Pickle ``value`` (state of an instance of ``env_cls``) as :func:`loads` reads it back.

    Raises :class:`RefusedGlobal` naming the first class or function it holds that the class's
    :func:`policy` does not admit, and whatever ``pickle`` raises for a value that does not
    pickle at all (an open file, a lock)."""
    return _dump(value, policy(env_cls), no_rubrics=False)


def _dump(value: Any, rules: SnapshotPolicy, *, no_rubrics: bool) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, rules, no_rubrics=no_rubrics).dump(value)
    return buf.getvalue()


def loads(data: bytes, env_cls: type, *, what: str = "environment state") -> Any:
    """Unpickle a snapshot's ``data`` for an instance of ``env_cls``, resolving only the globals
    its :func:`policy` admits.

    Safe on bytes anyone made up: no module outside the policy is imported and no function
    outside it is called; what runs is the construction of admitted values (their
    ``__new__``, ``__init__``, ``__setstate__``, ``__setitem__``, ``append``). Raises
    :class:`~openenv.errors.InvalidArgument` (``what`` names the part) for a refused global
    and for anything else wrong with the bytes."""
    rules = policy(env_cls)
    try:
        return _Unpickler(data, rules).load()
    except RefusedGlobal as e:
        why = f", {e.why}" if e.why else ""
        raise InvalidArgument(f"the snapshot's {what} names {e.name}{why}: refused ({rules.describe()})") from None
    except Exception as e:  # noqa: BLE001 - bytes a client sent: every failure is a bad snapshot
        raise InvalidArgument(f"the snapshot's {what} cannot be loaded: {type(e).__name__}: {e}") from None


def default_key() -> bytes:
    """``OPENENV_SNAPSHOT_KEY`` when set, else 32 random bytes (snapshots then verify only
    in this process)."""
    text = os.environ.get(KEY_ENV)
    return text.encode() if text else os.urandom(32)


def _mac(key: bytes, snap: environment_pb2.Snapshot) -> bytes:
    body = environment_pb2.Snapshot()
    body.CopyFrom(snap)
    body.ClearField("digest")
    return hmac.new(key, body.SerializeToString(deterministic=True), hashlib.sha256).digest()


def seal(key: bytes, snap: environment_pb2.Snapshot) -> environment_pb2.Snapshot:
    """Set ``snap.digest`` (HMAC-SHA256 of fields 1-8 under ``key``); returns ``snap``."""
    snap.digest = _mac(key, snap)
    return snap


def verify(key: bytes, snap: environment_pb2.Snapshot, name: str, version: str) -> None:
    """Refuse a snapshot this environment must not restore: another environment or version
    (FAILED_PRECONDITION), another format or a digest that does not verify (INVALID_ARGUMENT)."""
    if snap.env_name != name or snap.env_version != version:
        raise FailedPrecondition(
            f"the snapshot is of environment {snap.env_name or '?'!r} version {snap.env_version or '?'!r}; "
            f"this server runs {name!r} version {version!r}"
        )
    if snap.format != FORMAT:
        raise InvalidArgument(f"snapshot format {snap.format} is not supported (this server reads format {FORMAT})")
    if not hmac.compare_digest(snap.digest, _mac(key, snap)):
        raise InvalidArgument(
            "the snapshot's digest does not verify: it was altered, or made by a server with another "
            f"snapshot key (set {KEY_ENV} alike on replicas that restore each other's snapshots)"
        )


def _state_value(value: Any, rules: SnapshotPolicy) -> bool:
    try:
        _dump(value, rules, no_rubrics=True)
    except Exception:  # noqa: BLE001 - anything that does not pickle (within the policy) is configuration
        return False
    return True


def _config(node: Any) -> frozenset[str]:
    """The node's configuration attributes (``Rubric.snapshot_config``): never captured, never set."""
    return frozenset(getattr(type(node), "snapshot_config", ()))


def rubric_state(rubric: Any, env_cls: type) -> bytes:
    """The per-episode state of a rubric tree of an ``env_cls`` session: each node's attributes
    (scores, trajectories), by position in the tree, as :func:`dumps` writes them. Wiring (the
    bound environment, HTTP clients, child nodes) and values that do not pickle within the
    class's :func:`policy` (functions given at construction, objects of classes it does not
    admit) are configuration, equal in every session of the environment, and left out."""
    rules = policy(env_cls)
    nodes = [
        {
            k: v
            for k, v in vars(node).items()
            if k not in _RUBRIC_SKIP and k not in _config(node) and _state_value(v, rules)
        }
        for _, node in rubric.walk()
    ]
    return _dump(nodes, rules, no_rubrics=True)


def load_rubric_state(data: bytes, env_cls: type) -> list[dict[str, Any]]:
    """What :func:`rubric_state` captured, read by :func:`loads` (INVALID_ARGUMENT when refused
    or not a list of attribute dictionaries)."""
    nodes = loads(data, env_cls, what="rubric state")
    if not (
        isinstance(nodes, list)
        and all(isinstance(attrs, dict) and all(isinstance(k, str) for k in attrs) for attrs in nodes)
    ):
        raise InvalidArgument("the snapshot's rubric state is not a list of attribute dictionaries")
    return nodes


def apply_rubric_state(rubric: Any, nodes: list[dict[str, Any]], *, check_only: bool = False) -> None:
    """Put ``nodes`` (:func:`load_rubric_state`) back into ``rubric``'s nodes; INVALID_ARGUMENT,
    changing nothing, when the tree has another number of nodes. ``check_only``: only check."""
    tree = [node for _, node in rubric.walk()]
    if len(nodes) != len(tree):
        raise InvalidArgument(f"the snapshot's rubric has {len(nodes)} nodes; this environment's has {len(tree)}")
    for node, attrs in zip(tree, nodes, strict=True):
        named = sorted(set(attrs) & _config(node))
        if named:  # never in a snapshot this server made: a forged one, naming configuration
            raise InvalidArgument(f"the snapshot's rubric state sets configuration of {node.name!r}: {named}")
    if check_only:
        return
    for node, attrs in zip(tree, nodes, strict=True):
        vars(node).update({k: v for k, v in attrs.items() if k not in _RUBRIC_SKIP})


def restore_rubric(rubric: Any, data: bytes, env_cls: type, *, check_only: bool = False) -> None:
    """Put back what :func:`rubric_state` captured (``check_only``: only check that it would be
    put back); INVALID_ARGUMENT, changing nothing, when it cannot be."""
    apply_rubric_state(rubric, load_rubric_state(data, env_cls), check_only=check_only)
