"""``ale:GAME`` and ``ale:GAME/rgb``: Atari 2600 games of the Arcade Learning Environment.

``ale-py``'s wheel ships the ROMs, so nothing is downloaded. Each game is two entries:

* ``ale:Pong``: the frame a DQN-style agent sees, an ``(84, 84, 1)`` ``uint8`` tensor of the
  greyscale screen, area-averaged from 210x160 (as OpenCV's ``INTER_AREA``, without OpenCV);
* ``ale:Pong/rgb``: the full screen, a ``(210, 160, 3)`` ``uint8`` tensor (RGB).

Actions are the game's minimal action set, integers ``0..n-1`` (the schema's description names
them: ``0 NOOP, 1 FIRE, ...``); the reward is the game's score change. Both entries render the
full RGB screen on request (``render()``: the ``/web`` playground's picture).

**Options** (the handshake's, all optional, each checked):

* ``frameskip`` (int, 1-16, default 4): each action is repeated for that many emulator frames
  and the rewards summed;
* ``repeat_action_probability`` (number in [0, 1], default 0.25, Machado et al. 2018): *sticky
  actions*, the chance that the emulator repeats the previous action instead of the new one on
  each frame; 0 makes the game deterministic given its actions;
* ``max_num_frames_per_episode`` (int >= 1, default 108,000, 30 minutes of play): the episode
  is truncated after that many emulator frames;
* ``mode``, ``difficulty`` (int): a game mode and difficulty switch the game supports.

**Seeds.** ``reset(seed=s)`` seeds the emulator and its sticky-action generator: the same
seed and actions give the same frames and rewards, sticky actions included. ``terminated`` is
the game over, ``truncated`` the frame limit. Metadata: ``lives``, ``episode_frame_number``,
``frame_number``.

Batched stepping (``num_envs = N`` at the handshake, ``step_batch``) runs N games behind one
stream; ``make bench`` (``tools/bench/atari.py``) measures it at N=64.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

import openenv
from openenv_catalog.importers import ImporterUnavailable

__all__ = ["CURATED", "FRAME", "OPTIONS", "AtariEnvironment", "downsample", "load"]

CURATED = (
    "Pong",
    "Breakout",
    "SpaceInvaders",
    "Seaquest",
    "Qbert",
    "MsPacman",
    "BeamRider",
    "Enduro",
    "Asteroids",
    "Freeway",
    "Pong/rgb",
    "Breakout/rgb",
)

# The curated games' minimal action sets, as their ROMs declare them (catalog/tests/
# test_simulators.py checks each against the ROM): listing the catalog then loads no ROM.
_CURATED_ACTIONS = {
    "Pong": "NOOP FIRE RIGHT LEFT RIGHTFIRE LEFTFIRE",
    "Breakout": "NOOP FIRE RIGHT LEFT",
    "SpaceInvaders": "NOOP FIRE RIGHT LEFT RIGHTFIRE LEFTFIRE",
    "Seaquest": "NOOP FIRE UP RIGHT LEFT DOWN UPRIGHT UPLEFT DOWNRIGHT DOWNLEFT UPFIRE RIGHTFIRE LEFTFIRE DOWNFIRE "
    "UPRIGHTFIRE UPLEFTFIRE DOWNRIGHTFIRE DOWNLEFTFIRE",
    "Qbert": "NOOP FIRE UP RIGHT LEFT DOWN",
    "MsPacman": "NOOP UP RIGHT LEFT DOWN UPRIGHT UPLEFT DOWNRIGHT DOWNLEFT",
    "BeamRider": "NOOP FIRE UP RIGHT LEFT UPRIGHT UPLEFT RIGHTFIRE LEFTFIRE",
    "Enduro": "NOOP FIRE RIGHT LEFT DOWN DOWNRIGHT DOWNLEFT RIGHTFIRE LEFTFIRE",
    "Asteroids": "NOOP FIRE UP RIGHT LEFT DOWN UPRIGHT UPLEFT UPFIRE RIGHTFIRE LEFTFIRE DOWNFIRE UPRIGHTFIRE "
    "UPLEFTFIRE",
    "Freeway": "NOOP UP DOWN",
}

FRAME = (84, 84)  # (height, width) of the greyscale frame
SCREEN = (210, 160)  # the Atari 2600 screen, (height, width)
_RGB_SUFFIX = "/rgb"


def _ale() -> Any:
    try:
        import ale_py
    except ImportError as e:
        raise ImporterUnavailable(f"ale-py is not installed: pip install 'protoenv-catalog[atari]' ({e})") from e
    return ale_py


def downsample(grey: np.ndarray) -> np.ndarray:
    """A 210x160 greyscale screen as the 84x84x1 ``uint8`` frame (box filter: an area average)."""
    from PIL import Image

    small = Image.fromarray(grey).resize((FRAME[1], FRAME[0]), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.uint8)[:, :, None]


def _snake(game: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower()


def _int_option(options: Mapping[str, Any], key: str, default: int | None, lo: int, hi: int) -> int | None:
    v = options.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi or v != int(v):
        raise openenv.InvalidArgument(f"{key} must be an integer from {lo} to {hi}, got {v!r}")
    return int(v)


OPTIONS = frozenset({"frameskip", "repeat_action_probability", "max_num_frames_per_episode", "mode", "difficulty"})
_BASE_SEED = 0  # the emulator's own seed: fixed, so every instance starts from the same power-on state


class AtariEnvironment(openenv.Environment):
    """Base of the imported Atari games (one subclass per entry, made by :func:`load`).

    The emulator runs one frame per ``act`` with ALE's own stickiness off; frame-skip and
    sticky actions are applied here, from a generator seeded by ``reset(seed=...)``. So a
    seeded reset restores the power-on state saved once (no ROM reload: ALE reseeds only by
    reloading, ~0.1 s) and the episode is a function of the seed and the actions alone.
    """

    game: ClassVar[str] = ""
    rgb: ClassVar[bool] = False
    meanings: ClassVar[tuple[str, ...]] = ()
    deterministic = True
    max_sessions = 16

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        unknown = sorted(set(options) - OPTIONS)
        if unknown:
            raise openenv.InvalidArgument(f"unknown options {unknown}; {self.name} takes {sorted(OPTIONS)}")
        sticky = options.get("repeat_action_probability", 0.25)
        if isinstance(sticky, bool) or not isinstance(sticky, (int, float)) or not 0.0 <= sticky <= 1.0:
            raise openenv.InvalidArgument(f"repeat_action_probability must be a number in [0, 1], got {sticky!r}")
        self.sticky = float(sticky)
        self.frameskip = _int_option(options, "frameskip", 4, 1, 16) or 4
        max_frames = _int_option(options, "max_num_frames_per_episode", 108_000, 1, 10**9) or 108_000
        mode = _int_option(options, "mode", None, 0, 255)
        difficulty = _int_option(options, "difficulty", None, 0, 255)
        for index, label, value in ((1, "mode", mode), (2, "difficulty", difficulty)):
            allowed = _game_info(self.game)[index] if value is not None else ()
            if value is not None and value not in allowed:
                raise openenv.InvalidArgument(f"{self.game} has no {label} {value} (it has {list(allowed)})")
        # The emulator is made (or taken from the pool) at the first reset: opening a session
        # stays cheap, and a closed session's emulator serves the next one.
        self.key = (_snake(self.game), max_frames, mode, difficulty)
        self.emulator: _Emulator | None = None
        self.n_actions = len(self.meanings)
        self.rng = np.random.default_rng()
        self.previous: Any = None  # set at the first reset: NOOP, what a sticky first frame repeats
        self.restored = False

    @property
    def ale(self) -> Any:
        if self.emulator is None:
            self.emulator = _Emulator.take(self.key)
            self.actions = self.emulator.actions
            self.previous = self.actions[0]
        return self.emulator.ale

    def _frame(self) -> np.ndarray:
        if self.rgb:
            return self.render()
        assert self.emulator is not None
        if self.restored:
            return downsample(self.emulator.power_on_grey)
        self.ale.getScreenGrayscale(self.emulator.grey)
        return downsample(self.emulator.grey)

    def _info(self) -> dict[str, Any]:
        return {
            "lives": int(self.ale.lives()),
            "episode_frame_number": int(self.ale.getEpisodeFrameNumber()),
            "frame_number": int(self.ale.getFrameNumber()),
        }

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        fresh = self.emulator is None
        ale = self.ale
        if seed is not None or fresh:
            if seed is not None:
                self.rng = np.random.default_rng(seed)
            assert self.emulator is not None
            ale.restoreState(self.emulator.power_on)
            self.restored = True
        else:
            self.ale.reset_game()
            self.restored = False
        self.previous = self.actions[0]
        return openenv.StepResult(self._frame(), metadata=self._info())

    def step(self, action: Any) -> openenv.StepResult:
        if isinstance(action, bool) or not isinstance(action, (int, np.integer)) or not 0 <= action < self.n_actions:
            raise openenv.InvalidAction(
                f"{action!r} is not an action of {self.game}: an integer 0-{self.n_actions - 1}"
            )
        chosen = self.actions[int(action)]
        self.restored = False
        reward = 0.0
        ale = self.ale
        repeats = self.rng.random(self.frameskip) < self.sticky if self.sticky > 0 else None
        for k in range(self.frameskip):
            act = self.previous if repeats is not None and repeats[k] else chosen
            self.previous = act
            reward += ale.act(act)
            if ale.game_over(with_truncation=False) or ale.game_truncated():
                break
        return openenv.StepResult(
            self._frame(),
            reward=float(reward),
            terminated=bool(ale.game_over(with_truncation=False)),
            truncated=bool(ale.game_truncated()),
            metadata=self._info(),
        )

    def state(self) -> dict[str, Any]:
        if self.emulator is None:
            return {"game": self.game}
        ale = self.ale
        return {"game": self.game, "lives": int(ale.lives()), "episode_frame_number": ale.getEpisodeFrameNumber()}

    def render(self) -> np.ndarray:
        if self.emulator is None:
            raise openenv.FailedPrecondition("nothing to show before the first reset")
        return self.emulator.power_on_screen.copy() if self.restored else np.asarray(self.ale.getScreenRGB())

    def close(self) -> None:
        if self.emulator is not None:
            self.emulator.give_back()
            self.emulator = None


class _Emulator:
    """One loaded ROM with its power-on state, pooled per (game, frame limit, mode, difficulty):
    loading a ROM costs ~0.1 s of CPU, and a certification or a trainer opens many sessions."""

    _pool: ClassVar[dict[tuple[Any, ...], list[_Emulator]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()
    POOL_SIZE: ClassVar[int] = 64  # emulators kept per key once their sessions closed

    def __init__(self, key: tuple[Any, ...]) -> None:
        ale_py = _ale()
        game, max_frames, mode, difficulty = key
        ale = ale_py.ALEInterface()
        ale.setLoggerMode(ale_py.LoggerMode.Error)
        ale.setInt("random_seed", _BASE_SEED)
        ale.setFloat("repeat_action_probability", 0.0)
        ale.setInt("frame_skip", 1)
        ale.setInt("max_num_frames_per_episode", max_frames)
        ale.loadROM(ale_py.roms.get_rom_path(game))
        if mode is not None:
            ale.setMode(mode)
        if difficulty is not None:
            ale.setDifficulty(difficulty)
        if mode is not None or difficulty is not None:
            ale.reset_game()
        self.key = key
        self.ale = ale
        self.actions = list(ale.getMinimalActionSet())
        self.power_on = ale.cloneState(include_rng=True)
        # restoreState does not redraw the screen: the power-on screen is kept with the state,
        # and shown until the first frame after a restore is emulated.
        self.power_on_screen = np.asarray(ale.getScreenRGB()).copy()
        self.power_on_grey = np.asarray(ale.getScreenGrayscale()).copy()
        self.grey = np.empty(SCREEN, dtype=np.uint8)

    @classmethod
    def take(cls, key: tuple[Any, ...]) -> _Emulator:
        with cls._lock:
            free = cls._pool.get(key)
            if free:
                return free.pop()
        return cls(key)

    def give_back(self) -> None:
        with self._lock:
            free = self._pool.setdefault(self.key, [])
            if len(free) < self.POOL_SIZE:
                free.append(self)


@functools.cache
def _game_info(game: str) -> tuple[list[str], tuple[int, ...], tuple[int, ...]]:
    """A game's minimal action set (names), modes and difficulties, read from its ROM once."""
    ale_py = _ale()
    if _snake(game) not in ale_py.roms.get_all_rom_ids():
        raise LookupError(f"ale-py has no game {game!r} (its ROMs: {', '.join(sorted(ale_py.roms.get_all_rom_ids()))})")
    probe = ale_py.ALEInterface()
    probe.setLoggerMode(ale_py.LoggerMode.Error)
    probe.loadROM(ale_py.roms.get_rom_path(_snake(game)))
    meanings = [a.name for a in probe.getMinimalActionSet()]
    modes = tuple(int(m) for m in probe.getAvailableModes())
    difficulties = tuple(int(d) for d in probe.getAvailableDifficulties())
    return meanings, modes, difficulties


def load(ident: str) -> type[AtariEnvironment]:
    """The environment class of ``GAME`` (84x84 grey) or ``GAME/rgb`` (the full RGB screen)."""
    ale_py = _ale()
    rgb = ident.endswith(_RGB_SUFFIX)
    game = ident.removesuffix(_RGB_SUFFIX)
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", game):
        raise LookupError(f"{ident!r} is not GAME or GAME/rgb with GAME in CamelCase (e.g. Pong, SpaceInvaders/rgb)")
    if game in _CURATED_ACTIONS:
        meanings = _CURATED_ACTIONS[game].split()
    else:
        meanings = _game_info(game)[0]
    shape = (*SCREEN, 3) if rgb else (*FRAME, 1)
    name = "ale-" + _snake(game).replace("_", "-") + ("-rgb" if rgb else "")
    frame = "the full RGB screen (210x160x3)" if rgb else "84x84 greyscale frames"
    attrs: dict[str, Any] = {
        "name": name,
        "game": game,
        "rgb": rgb,
        "meanings": tuple(meanings),
        "version": str(getattr(ale_py, "__version__", "0")),
        "description": f"Atari 2600 {game} (Arcade Learning Environment), {frame}; sticky actions, frame-skip 4.",
        "action_type": {
            "type": "integer",
            "title": "action (" + ", ".join(f"{i} {m}" for i, m in enumerate(meanings)) + ")",
            "minimum": 0,
            "maximum": len(meanings) - 1,
            "description": ", ".join(f"{i} {m}" for i, m in enumerate(meanings)),
        },
        "observation_type": openenv.TensorSpec(np.uint8, shape, 0, 255),
        "max_episode_steps": None,
        "reward_range": None,
        "example_actions": tuple(range(min(len(meanings), 3))),
        "metadata": {"source": f"ale:{ident}", "kind": "atari", "actions": meanings, "render": "rgb"},
    }
    return type(f"Atari_{game}{'_rgb' if rgb else ''}", (AtariEnvironment,), attrs)
