"""The environment author's side: subclass :class:`Environment`.

A minimal environment::

    class Counter(openenv.Environment):
        action_type = CounterAction          # a proto message class, a dataclass, ...
        observation_type = CounterObservation

        def reset(self, *, seed=None, episode_id=None, options=None):
            self.n = 0
            return CounterObservation(value=0)

        def step(self, action):
            self.n += action.delta
            return openenv.StepResult(CounterObservation(value=self.n), reward=1.0,
                                      terminated=self.n >= 10)

    openenv.serve(Counter, port=50051)

What you may rely on:

* One instance per session, created by the factory with the session's handshake
  options as keyword arguments; ``close()`` is called exactly once when the session
  ends (close request, disconnect, cancellation, idle timeout or shutdown).
* Calls to one instance never overlap. Sync methods run in a worker thread (off the
  event loop) unless ``run_in_thread = False`` or they are measured consistently fast
  (``inline_threshold_s``); ``async def`` methods run on the loop.
* The runtime validates actions against ``action_type`` before ``step`` sees them,
  counts steps, assigns episode ids, refuses steps before reset or after the end, and
  truncates at ``max_episode_steps``. ``state()`` only returns the environment-specific
  part; episode id, step count and status are added by the runtime.
* Raise :class:`openenv.InvalidAction` for an action you reject; any other exception
  becomes an INTERNAL error for that request and never ends the session or the server.
* Snapshot bytes are untrusted input, sealed or not: the default ``restore`` reads them
  with a restricted loader that imports, calls or changes nothing beyond value types, your
  package's classes and ``snapshot_globals`` (``INVALID_ARGUMENT`` otherwise, nothing changed).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from openenv.errors import InvalidArgument, Unimplemented
from openenv.protocol import StepResult
from openenv.runtime import snapshots as _snapshots
from openenv.runtime.grading import Grading, GradingProbe
from openenv.runtime.tools import CallToolAction, CallToolObservation, ToolDef, collect_tools

if TYPE_CHECKING:
    from openenv.runtime.rubrics import Rubric

__all__ = ["Environment", "StepResult"]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Environment:
    """Base class of environments: subclass it and override ``reset`` and ``step``; the rest is optional.

    The runtime (:mod:`openenv.runtime.session`) creates one instance per session by calling the
    factory (the class, or the callable given to :func:`openenv.serve`) with the session's
    handshake options as keyword arguments, and calls :meth:`close` exactly once when the session
    ends. Calls to one instance never overlap. Every hook may be ``def`` or ``async def``: sync
    hooks run in a worker thread unless :attr:`run_in_thread` is False; coroutines run on the
    server's event loop.

    The class attributes are declarations. The runtime reads them from the class (not from
    instances; :attr:`rubric` is the one exception) when a server starts, advertises them to
    clients in ``EnvironmentInfo`` and its ``Capabilities`` (docs/protocol.md §1.2, §1.3), and
    enforces what it can (action types, step limit, capacity, auto-reset); what it cannot
    (:attr:`deterministic`, :attr:`reward_range`, ``state`` before reset), ``openenv certify``
    checks.

    Hooks: :meth:`reset` and :meth:`step` (not needed for a pure tool environment), :meth:`state`
    and :meth:`close`; for tool environments (methods marked :func:`openenv.tool`), :meth:`reward`
    and :meth:`finish_tool_step`; :meth:`tools` lists the declared tools.

    This reference is generated from the docstrings: ``.venv/bin/pdoc openenv -o build/api``
    (CONTRIBUTING.md); ``python/tests/test_docs.py`` fails when an attribute or hook of this class
    loses its docstring.
    """

    name: ClassVar[str] = ""
    """The environment's name, advertised as ``EnvironmentInfo.name`` (shown by ``openenv info``,
    the HTTP side's ``/metadata`` and the MCP server's name).

    Default: the class name in snake case (``GridWorld`` -> ``grid_world``), derived again for
    every subclass; a name set explicitly is inherited by subclasses.
    """
    version: ClassVar[str] = "0.1.0"
    """The environment's own version (semver), advertised as ``EnvironmentInfo.version``;
    independent of the protocol's (``openenv.PROTOCOL_VERSION``). Default ``"0.1.0"``.
    """
    description: ClassVar[str] = ""
    """A one-line description, advertised as ``EnvironmentInfo.description``. Default (empty):
    the first paragraph of the class docstring.
    """
    action_type: ClassVar[Any] = None
    """The type of the actions :meth:`step` receives.

    The runtime turns it into a codec once (:mod:`openenv.runtime.codec`), advertises it as
    ``EnvironmentInfo.action`` (a ``TypeSpec``; message types come with their descriptors, so a
    client in any language can build actions), and decodes and validates every action before
    :meth:`step` sees it: a payload of the wrong kind or type, or one that breaks the schema, is
    answered ``INVALID_ARGUMENT`` and never reaches the environment.

    One of: a protobuf message class (typed payloads); a class with ``__openenv_proto__``,
    ``to_proto()`` and ``from_proto()`` (a Python view of a message); an
    :class:`openenv.TensorSpec` (NumPy arrays); a JSON Schema ``dict``; any other type pydantic
    understands (a dataclass, ``TypedDict``, ``BaseModel``, ``int``, ``list[str]``...), sent as
    JSON with the schema pydantic derives. ``None`` (the default) declares nothing: any JSON-like
    value, tensor or message is passed through as it is.

    An environment that declares tools (:func:`openenv.tool`), no :meth:`step` of its own and no
    action type gets :class:`openenv.CallToolAction` (and :class:`openenv.CallToolObservation` as
    :attr:`observation_type`).
    """
    observation_type: ClassVar[Any] = None
    """The type of the observations :meth:`reset` and :meth:`step` return, in any of the forms
    :attr:`action_type` accepts; advertised as ``EnvironmentInfo.observation``. The runtime
    encodes what the environment returns with it; an observation of ``None`` is sent as no
    payload. Default ``None``: JSON-like values, NumPy arrays and protobuf messages are sent as
    they are.
    """
    state_type: ClassVar[Any] = None
    """The type of what :meth:`state` returns, in any of the forms :attr:`action_type` accepts;
    advertised as ``EnvironmentInfo.state``. ``None`` returned by :meth:`state` is sent as no
    state, whatever this type. Default ``None``.
    """
    max_sessions: ClassVar[int] = 64
    """How many sessions one server process holds at once, advertised as
    ``Capabilities.max_sessions``. A handshake beyond it is answered ``RESOURCE_EXHAUSTED``
    (fatal); every session has its own instance. It also bounds the ``num_envs`` of a vectorised
    session. Default 64; ``openenv serve --max-sessions N`` or ``openenv.serve(..., max_sessions=N)``
    sets it for one server.
    """
    concurrent_sessions: ClassVar[bool] = True
    """False when instances cannot run side by side in one process (a process-wide simulator, a
    single device...): the capacity is then 1 whatever :attr:`max_sessions` says, and asking a
    server for more (``--max-sessions 2``) is an error at start. Advertised as
    ``Capabilities.concurrent_sessions``. Default True.
    """
    deterministic: ClassVar[bool] = False
    """True when the same ``reset`` seed and the same actions give the same observations, rewards
    and flags (floats within :attr:`float_tolerance`). Advertised as
    ``Capabilities.deterministic``; the runtime cannot enforce it, the conformance suite
    (``determinism.*`` checks) replays episodes to verify it. Draw every random number from the
    seed :meth:`reset` receives, never from a process-wide generator. Default False.
    """
    seeded: ClassVar[bool] = False
    """True when :meth:`reset`'s seed selects the episode: together with :attr:`deterministic`,
    different seeds give different episodes (for some seeds; not necessarily every pair).
    Advertised as ``Capabilities.seeded``; ``openenv certify`` (``determinism.seeds_honoured``)
    then catches an environment that ignores its seed. Leave it False when the seed changes
    nothing (an environment without randomness). Default False.
    """
    lenient_actions: ClassVar[bool] = False
    """Opt out of strict action validation (RFC 0007). False (the default): an action of a
    Python type (dataclass, pydantic model, TypedDict, ...) is accepted only when it is exactly a
    value of the advertised JSON Schema: no coercion (``"7"`` or ``true`` for an ``int``
    field is INVALID_ARGUMENT) and no unknown fields (INVALID_ARGUMENT naming them); the
    advertised schema closes its objects (``additionalProperties: false``). True: pydantic's
    lax mode, which coerces values and drops unknown fields; advertised as
    ``Capabilities.lenient_actions`` so clients and the conformance suite know.
    """
    float_tolerance: ClassVar[float] = 0.0
    """Absolute tolerance for comparing floats (in observations and rewards) when determinism is
    checked; advertised as ``Capabilities.float_tolerance``. Default ``0.0``: floats must be
    equal.
    """
    auto_reset: ClassVar[bool] = False
    """True: a step when no episode is running (before the first reset, after the end, after a
    step timeout) starts a new episode instead of failing with ``FAILED_PRECONDITION``. The
    runtime then calls :meth:`reset` with no seed and a new episode id, the action is not
    applied, and the step's answer is the reset's time step (step count 0). Advertised as
    ``Capabilities.auto_reset``. Default False.
    """
    max_episode_steps: ClassVar[int | None] = None
    """The step limit of an episode, advertised as ``Capabilities.max_episode_steps``. The
    runtime sets ``truncated = True`` on the step that brings the episode's step count to this
    number, unless that step set ``terminated``; a further step is refused (or auto-resets, see
    :attr:`auto_reset`). Default ``None``: no limit, episodes end when the environment says so.
    """
    reward_range: ClassVar[tuple[float, float] | None] = None
    """Inclusive ``(min, max)`` bounds of every reward, when rewards are bounded; advertised as
    ``Capabilities.reward_min`` and ``reward_max``. The runtime neither clips nor checks rewards;
    the conformance check ``rewards.range`` verifies that every reward it sees lies within these
    bounds. Default ``None``: unbounded (nothing advertised).
    """
    run_in_thread: ClassVar[bool] = True
    """Where the sync (``def``) hooks run.

    True (the default): in the server's worker thread pool, off the event loop, so a slow or
    blocking call delays only its own session, and a step timeout can answer
    ``DEADLINE_EXCEEDED`` while the step still runs (the next call to the instance waits for it).
    False: directly on the event loop, which saves a thread hop per call for hooks that are fast
    and never block; a slow hook then stalls every session of the process, and timeouts cannot
    interrupt it. With True, hooks measured consistently fast run on the loop too, until one
    call is slow (:attr:`inline_threshold_s`).

    It applies to the factory (``__init__``), :meth:`reset`, :meth:`step`, :meth:`state`,
    :meth:`close`, sync tools and sync rubrics. ``async def`` hooks always run on the event
    loop, and so do :meth:`finish_tool_step` and :meth:`reward`.
    """
    inline_threshold_s: ClassVar[float | None] = None
    """With :attr:`run_in_thread` True: the time under which a sync hook may run directly on the
    event loop instead of a worker thread (:mod:`openenv.runtime.inline`).

    The runtime times each sync hook; one whose last 16 calls all took less than this runs
    inline from then on, and goes back to the threads as soon as one call takes longer (the
    hand-off to a thread costs more than a call of a few microseconds). ``None`` (the default):
    the server's threshold (``openenv serve --inline-threshold-us``, default 50 µs). ``0``:
    never inline, every sync call on a worker thread, which hooks that may block waiting for
    another session or for the server (a barrier, a condition, a queue between sessions) need:
    inline, such a wait would hold the event loop the other side needs. A server threshold of 0
    turns inline execution off for every class.
    """
    example_actions: ClassVar[Sequence[Any]] = ()
    """Valid actions (values of :attr:`action_type`), advertised as ``EnvironmentInfo.action.examples``.

    They show clients what an action looks like, and the conformance suite (``openenv certify``)
    tries them before the actions it generates from the declared type; with no declared type
    they are the only valid actions it knows, and without them the checks that need one are
    skipped. They are encoded when the server starts: an example that does not fit
    :attr:`action_type` fails there. Default: none.
    """
    action_budget: ClassVar[int] = 0
    """How many steps per episode a conformance run should spend on this environment
    (``Capabilities.action_budget``): a bound for environments whose steps are slow or costly.
    ``0`` (the default) states no preference; ``openenv certify`` then uses its own (12).
    """
    metadata: ClassVar[Mapping[str, Any]] = {}
    """Free-form information about the environment (JSON-like values only), advertised as
    ``EnvironmentInfo.metadata``. The HTTP side's ``/metadata`` endpoint, OpenEnv's, reads
    ``author``, ``documentation_url`` and ``readme`` (or ``readme_content``) from it. Default:
    empty.
    """
    snapshots: ClassVar[bool] = False
    """Offer snapshot, restore and fork (RFC 0006, ``Capabilities.snapshots``) with the default
    :meth:`snapshot` and :meth:`restore`, which pickle the instance's attributes within
    :attr:`snapshot_globals`' rules. Overriding :meth:`snapshot` offers them too, whatever this
    says. Default: False (those requests answer ``UNIMPLEMENTED``).
    """
    snapshot_globals: ClassVar[Sequence[Any]] = ()
    """More classes and functions a snapshot of this class may name, beyond the default ones.

    What you can rely on: the default :meth:`restore` (and the runtime, for the rubric's state)
    reads a snapshot's pickle with a restricted loader (:func:`openenv.runtime.snapshots.loads`),
    on every path (restore, fork, ``--isolation process`` workers). However the snapshot is
    sealed, that loader never imports a module, calls a function or changes a class that is
    not admitted; a snapshot naming anything else is refused with ``INVALID_ARGUMENT`` before
    the session changes, and the session and the server go on. Admitted by default: builtin
    and standard-library value types (numbers, strings, containers, ``collections``,
    ``datetime``, ``decimal``, ``fractions``, ``random.Random``, ``uuid``, ``pathlib``, compiled
    ``re`` patterns, ...), numpy arrays, dtypes, scalars and random generators, the runtime's
    value types (``Score``, ``CallToolAction``, ...; ``openenv.runtime.snapshots.SAFE_GLOBALS``
    lists them all), and every **class** defined in an already imported module of the
    top-level package (or module) of this class and of its bases (not ``openenv`` nor the
    standard library): your dataclasses, enums, named tuples, protobuf messages.

    Add what else your state holds: ``"module:qualname"`` (one class or function, e.g.
    ``"ipaddress:IPv4Address"``), the class or function itself, or ``"package"`` (every class
    defined in it). Without it, the default :meth:`snapshot` answers ``UNIMPLEMENTED`` naming
    what it would need, and a rubric attribute holding it is left out of the rubric's state
    (as configuration). Whoever holds the snapshot key can make a restore construct any
    admitted class with arguments of their choosing: admit only value types, never a class whose
    constructor or ``__setstate__`` acts (starts a process, opens a path, runs a command), and
    keep such classes out of your environment's own package if it uses the default hooks.
    Checked when the server starts (a malformed entry is an error).
    """
    task_splits: ClassVar[Mapping[str, str] | Sequence[str]] = ()
    """The environment's task splits (RFC 0004): split name -> description (or just the names),
    the first being the default, e.g. ``{"train": "...", "test": "..."}``.

    With splits declared, the runtime calls :meth:`list_tasks` once per split when a server
    starts, advertises the splits' sizes in ``EnvironmentInfo.task_splits`` and sets
    ``Capabilities.tasks``; clients page through them (``EnvClient.list_tasks``) and choose an
    episode's task (``reset(task_id=...)``), which :meth:`reset` receives as
    ``options["task_id"]`` (a string), after the runtime checked that it is declared. Default:
    none.
    """
    rubric: Rubric | None = None
    """The reward rubric: an :class:`openenv.rubrics.Rubric` tree (docs/rubrics.md), or ``None``.

    Its spec is advertised as ``EnvironmentInfo.rubric``. Each session gets its own copy (a
    clone of the class's, or the rubric ``__init__`` assigned to ``self.rubric``), bound to the
    instance, reset on every episode reset and closed with the session. Every step whose result
    has no reward (``None``) is scored by it, within the step's timeout: ``reward`` is the root
    score, ``reward_breakdown`` the score tree, and at the end of an episode the trajectory
    credits are added to the metadata. A step that returns its own reward is not scored. A value
    that is not a Rubric is refused when the server starts.
    """

    grading: ClassVar[Grading | None] = None
    """The grading declaration of an environment whose reward is a verdict on submitted work
    (RFC 0015; docs/protocol.md §7.1): an :class:`openenv.Grading` (feedback level, levels a
    session may ask for at reset, metadata keys that pass in a strict episode). Advertised as
    ``Capabilities.grades``, ``feedback`` and ``feedback_offered``. An environment with a tool
    declared grading (``@openenv.tool(grades=True)``, or RFC 0010's ``"grades"``) and no
    declaration gets ``Grading()``: strict feedback, nothing else offered.

    In a **strict** episode the runtime replaces a grading tool's result with the step's reward,
    cuts every reward breakdown to its root, keeps only ``public_metadata`` keys in a step's
    metadata, and refuses a grading tool as a side call (``FAILED_PRECONDITION``). The
    environment reads the episode's level in :meth:`reset`'s ``options["feedback"]`` (the runtime
    fills it in) and keeps what else it returns (its :meth:`state`, a grading step's errors)
    free of the grader's hidden data. Default: ``None`` (not a grading environment).
    """

    # Filled by __init_subclass__: tools and which methods are coroutines.
    __openenv_tools__: ClassVar[dict[str, ToolDef]] = {}
    __openenv_async__: ClassVar[frozenset[str]] = frozenset()
    # Set on subclasses only: whether ``name`` was derived from the class name (not inherited).
    __openenv_derived_name__: ClassVar[bool]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # An explicit name is inherited; a derived one is derived again for each subclass.
        if not cls.__dict__.get("name") and (not cls.name or getattr(cls, "__openenv_derived_name__", False)):
            cls.name = _snake(cls.__name__)
            cls.__openenv_derived_name__ = True
        elif cls.__dict__.get("name"):
            cls.__openenv_derived_name__ = False
        cls.__openenv_tools__ = collect_tools(cls)
        cls.__openenv_async__ = frozenset(
            m
            for m in ("reset", "step", "state", "close", "snapshot", "restore", "render")
            if inspect.iscoroutinefunction(getattr(cls, m))
        )
        if cls.__openenv_tools__ and cls.action_type is None and cls.step is Environment.step:
            cls.action_type = CallToolAction
            cls.observation_type = CallToolObservation

    def __init__(self, **options: Any) -> None:
        """Receives the session's handshake options (``HandshakeRequest.options``, e.g.
        ``EnvClient(url, options={...})``) as keyword arguments; the base class keeps them in
        ``self.options``.

        Unknown options may be ignored. Raise :class:`openenv.InvalidArgument` to refuse the
        options: the error is fatal and the session is not opened (any other exception is a fatal
        ``INTERNAL``). An override that names its options should still accept ``**options`` to
        tolerate ones it does not know.
        """
        self.options = options
        """The handshake options this instance was created with (see ``__init__``)."""

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> Any:
        """Start an episode. Return its first observation, or a :class:`openenv.StepResult` (to add
        metadata, or to end the episode at once); a reset normally has no reward.

        Allowed in every episode status: a reset abandons the running episode, if any. ``seed`` is
        the client's (``None``: choose one; with :attr:`deterministic`, the same seed must give the
        same episode). ``episode_id`` is always set, to the client's or to a fresh uuid4 in hex, and
        the runtime reports it itself. ``options`` are this reset's environment-specific options (a
        dict, empty when none were sent); raise :class:`openenv.InvalidArgument` to refuse them.
        An exception leaves the session's episode id, step count and status as they were. Called
        any number of times per instance. The default returns ``None`` (no observation).
        """
        return None

    def step(self, action: Any) -> Any:
        """Apply ``action`` to the running episode. Return a :class:`openenv.StepResult`, or just an
        observation (no reward, episode not ended).

        ``action`` is already decoded and validated against :attr:`action_type`. ``step`` is
        called only while an episode runs: the runtime refuses steps before the first reset and
        after the end (``FAILED_PRECONDITION``; or auto-resets, see :attr:`auto_reset`), counts steps,
        assigns episode ids and truncates at :attr:`max_episode_steps`.

        ``reward`` is a number or ``None`` (no reward, which is not 0; with a :attr:`rubric`,
        ``None`` lets the rubric score the step). ``terminated`` and ``truncated`` have Gymnasium's
        meaning. Raise :class:`openenv.InvalidAction` for an action the rules reject: the answer is
        ``INVALID_ARGUMENT``, the step is not counted and the episode goes on. Any other exception is
        answered ``INTERNAL`` for this request only; the session and the server go on. When the
        client's step timeout elapses first, the answer is ``DEADLINE_EXCEEDED`` and the episode
        becomes ``ABORTED``.

        The default, for environments that declare tools and no ``step``, calls the tool named by
        an :class:`openenv.CallToolAction` and returns :meth:`finish_tool_step`'s result; without
        tools it answers ``UNIMPLEMENTED``.
        """
        raise Unimplemented(f"{type(self).__name__} does not implement step")

    def state(self) -> Any:
        """The environment-specific part of the session's state (a value of :attr:`state_type`), or
        ``None`` for none. The runtime adds the episode id, the step count and the episode status.

        Called in every episode status, **including before the first reset** (status
        ``NOT_STARTED``, empty episode id, step count 0), after a refused or failed request, after
        the end of an episode and after a step timeout. The protocol promises that ``state`` never
        fails once a session is open (docs/protocol.md §3.6) and the conformance check
        ``lifecycle.state_never_fails`` holds the environment to it, so do not assume :meth:`reset`
        ran: before it, return ``None`` (sent as no state) or an initial value. An exception here is
        answered ``INTERNAL``. The default returns ``None``.
        """
        return None

    def render(self) -> Any:
        """Optional: a picture of the current state, for people (the ``/web`` playground).

        Return an SVG document (``str`` starting with ``<svg`` or ``<?xml``), PNG bytes, an
        RGB(A) array of shape ``(height, width, 3 or 4)`` with ``uint8`` values, or plain text;
        may be ``async``. Called between requests, never during one, and never by trainers'
        clients unless they ask (``{"type": "openenv.render"}`` on ``/ws``). Not overriding it
        means no picture (``UNIMPLEMENTED``).
        """
        raise Unimplemented(f"{type(self).__name__} has no render hook")

    def close(self) -> None:
        """Release the instance's resources (processes, files, connections).

        Called exactly once per instance, when its session ends for whatever reason: a close request,
        the client's disconnect or cancellation, the idle timeout, a fatal error or the server's
        shutdown; after any call still running on the instance has finished (waiting at most 30 s).
        Exceptions are logged and otherwise ignored. When the factory given to
        :func:`openenv.serve` is a function rather than a class, it is called once at start to learn
        the class, and that probe instance is closed too.
        """

    def snapshot(self) -> bytes:
        """The instance's state as bytes, for :meth:`restore` on another instance of this class
        (of the same version) to continue exactly from here: a snapshot, or a fork of the session.

        Called in every episode status, between requests (never during another call). The
        runtime adds the episode id, step count, status and rubric state itself, and seals the
        result so that only this server (or one sharing ``OPENENV_SNAPSHOT_KEY``) accepts it
        back. Everything that influences later observations must be in it, random generators
        included: the certifier checks that a restored session reproduces the original one.

        The default pickles the instance's attributes (except ``rubric``, which the runtime
        handles) with :func:`openenv.runtime.snapshots.dumps`. When one does not pickle (an open
        file, a subprocess, a socket), or holds a class or function that :meth:`restore` would
        refuse (see :attr:`snapshot_globals`), it raises ``UNIMPLEMENTED`` naming it. Override
        both hooks to capture such state another way (e.g. a workspace as a tar archive, a game
        as its move list).
        """
        state = {k: v for k, v in vars(self).items() if k != "rubric"}
        try:
            return _snapshots.dumps(state, type(self))
        except _snapshots.RefusedGlobal as e:
            raise Unimplemented(
                f"{type(self).__name__} cannot be snapshotted by default: its state holds {e.name}, which a "
                f"restore would refuse to load; add it to {type(self).__name__}.snapshot_globals, or override "
                "snapshot() and restore()"
            ) from e
        except Exception as e:
            raise Unimplemented(
                f"{type(self).__name__} cannot be snapshotted by default: its state does not pickle "
                f"({type(e).__name__}: {e}); override snapshot() and restore()"
            ) from e

    def restore(self, data: bytes) -> None:
        """Make this instance's state the one :meth:`snapshot` returned as ``data`` (on this
        instance or another of the same class and version).

        ``data`` comes from a snapshot sealed with this server's key, but a key is shared by a
        fleet and may leak: treat ``data`` as untrusted input, and raise
        :class:`openenv.InvalidArgument` for bytes you cannot accept (a refused restore must
        change nothing). The default replaces the instance's attributes (except ``rubric``) with
        the pickled ones, read with :func:`openenv.runtime.snapshots.loads`: it never imports or
        calls anything :attr:`snapshot_globals` does not admit, refusing such a snapshot with
        ``INVALID_ARGUMENT`` before it changes anything. An override that still pickles should
        read with ``openenv.runtime.snapshots.loads(data, type(self))``, never ``pickle.loads``.
        """
        state = _snapshots.loads(data, type(self))
        if not (isinstance(state, dict) and all(isinstance(k, str) for k in state)):
            raise InvalidArgument("the snapshot's environment state is not a dictionary of attributes")
        state.pop("rubric", None)
        keep = {k: v for k, v in vars(self).items() if k == "rubric"}
        vars(self).clear()
        vars(self).update(state)
        vars(self).update(keep)

    def reward(self, action: Any, observation: Any) -> float | None:
        """The reward of a tool-call step, used by the default tool ``step`` (through
        :meth:`finish_tool_step`).

        ``action`` is the :class:`openenv.CallToolAction`, ``observation`` the
        :class:`openenv.CallToolObservation` holding the tool's result. Return a number, or ``None``
        for no reward (with a :attr:`rubric`, the rubric then scores the step). Side calls
        (``call_tool`` outside the step loop) are not steps and are never rewarded. Runs on the
        event loop: keep it cheap. Default: ``None``.
        """
        return None

    def finish_tool_step(self, action: Any, observation: Any) -> Any:
        """The result of a tool-call step of the default tool ``step``, after the tool ran.

        ``observation`` is the :class:`openenv.CallToolObservation`. The default returns it with
        :meth:`reward`; override to end the episode (e.g. on a ``submit_answer`` tool) or to add
        metadata, and return a :class:`openenv.StepResult`. Not called for side calls. Runs on the
        event loop: keep it cheap.
        """
        return StepResult(observation=observation, reward=self.reward(action, observation))

    @classmethod
    def preflight(cls) -> None:
        """Check, once when a server starts, that this machine can serve the environment; raise
        (any exception; ``RuntimeError`` with a message saying what is missing and how to get it)
        to refuse to start, before any session. ``openenv serve`` prints the message and exits 1.

        For what a session would otherwise discover too late: a tool, a device, a model, a
        sandbox (coding_env checks here that submitted code can be confined as required, and
        that its answers are invisible to that code: ``openenv.sandbox.check``). Called in the
        server's process, whatever the isolation mode. Default: nothing to check.
        """

    @classmethod
    def grading_probes(cls) -> Sequence[GradingProbe]:
        """Tasks as the certifier's ``grading`` level plays them (RFC 0015): for each, the
        environment's reference solution (tool calls that must earn the top reward), its null
        solutions (the baseline no attack may beat) and, where task contents vary with the seed,
        another instance's literal answer to replay. Trusted data, never served to agents: the
        certifier reads it by importing the class, or with ``python -m openenv.runtime.grading_probes
        MODULE:CLASS`` in an image. Default: none (the level's checks that need a
        reference or the environment's own nulls then report that they were not exercised).
        """
        return ()

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[Any]:
        """The tasks of ``split`` (one of :attr:`task_splits`), in a stable order: values of
        :class:`openenv.TaskInfo` (id, metadata a policy may see) or plain ids. Ids are unique
        across splits. Called once per split when a server starts. Default: none.
        """
        return ()

    @classmethod
    def tools(cls) -> dict[str, ToolDef]:
        """The tools this environment declares with :func:`openenv.tool` (name -> definition), those of
        base classes first, collected when the class is defined.

        They are served as side calls (``list_tools``/``call_tool``, in any episode status, not
        counted as steps) and, when the environment has no ``step`` of its own, as step actions
        (:class:`openenv.CallToolAction`). Without tools, ``list_tools`` and ``call_tool`` answer
        ``UNIMPLEMENTED``. See docs/tools.md.
        """
        return cls.__openenv_tools__
