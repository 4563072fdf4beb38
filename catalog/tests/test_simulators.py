"""MuJoCo (``mujoco:``) and Atari (``ale:``) entries with the real simulators: declared spaces
exactly Gymnasium's, seeded episodes over a real gRPC server equal to the simulator's own,
frame-skip and sticky actions as options, frames as tensors and as renders (``/ws``'s
``openenv.render``, what the ``/web`` playground draws), batched stepping, options refused.

Every curated entry is loaded and its spaces compared (cheap); the episodes are played on one
task of each kind (the catalog certifies one entry of each importer in full, see .ci/run).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import openenv

pytest.importorskip("mujoco")
pytest.importorskip("ale_py")

from openenv_catalog import load
from openenv_catalog.importers import ale, mujoco

TIMEOUT = 120.0  # a hang guard only


def run(factory: Any, fn: Callable[..., Awaitable[Any]], client: Any = openenv.EnvClient, **kw: Any) -> Any:
    async def main() -> Any:
        async with openenv.Server(factory, "127.0.0.1", 0) as srv:
            async with client(srv.address, **kw) as env:
                return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


# --------------------------------------------------------------------------- MuJoCo


def test_every_mujoco_entry_declares_gymnasiums_exact_spaces() -> None:
    import gymnasium

    for env_id in mujoco.CURATED:
        cls = load(f"mujoco:{env_id}")
        ref = gymnasium.make(env_id)
        try:
            for declared, space in ((cls.action_type, ref.action_space), (cls.observation_type, ref.observation_space)):
                assert isinstance(space, gymnasium.spaces.Box), env_id
                assert np.dtype(declared.dtype) == space.dtype, env_id
                assert tuple(declared.shape) == space.shape, env_id
                # Every curated space has one bound for all its elements: the declaration is exact.
                for bound, values in ((declared.minimum, space.low), (declared.maximum, space.high)):
                    if np.all(np.isinf(values)):
                        assert bound is None, env_id
                    else:
                        assert np.all(values == bound), (env_id, bound, values)
            assert cls.max_episode_steps == ref.spec.max_episode_steps
            assert cls.metadata["kind"] == "simulator"
        finally:
            ref.close()


def test_a_seeded_hopper_episode_over_the_wire_is_mujocos_own() -> None:
    import gymnasium

    cls = load("mujoco:Hopper-v5")
    ref = gymnasium.make("Hopper-v5")
    ref_obs, _ = ref.reset(seed=11)
    ref.action_space.seed(3)
    actions = [ref.action_space.sample() for _ in range(8)]
    expected = [ref.step(a) for a in actions]
    ref.close()

    async def go(env: Any) -> Any:
        first = await env.reset(seed=11)
        return first, [await env.step(a) for a in actions]

    first, steps = run(cls, go)
    assert first.observation.dtype == np.float64 and np.array_equal(first.observation, ref_obs)
    for got, (obs, reward, terminated, truncated, _) in zip(steps, expected, strict=True):
        assert np.array_equal(got.observation, obs)
        assert got.reward == pytest.approx(float(reward), abs=0)
        assert (got.terminated, got.truncated) == (terminated, truncated)


def test_mujoco_refuses_actions_out_of_bounds_and_options_that_change_its_spaces() -> None:
    cls = load("mujoco:InvertedPendulum-v5")  # actions in [-3, 3]

    async def go(env: Any) -> Any:
        await env.reset(seed=0)
        ok = await env.step(np.array([3.0], dtype=np.float32))
        with pytest.raises(openenv.InvalidArgument):
            await env.step(np.array([3.5], dtype=np.float32))
        return ok

    assert run(cls, go).reward == 1.0
    for options in (
        {"exclude_current_positions_from_observation": False},  # a bigger observation
        {"xml_file": "/etc/passwd"},  # a file on the server
        {"render_mode": "human"},
        {"width": 0},
        {"no_such_option": 1},
    ):
        with pytest.raises(openenv.InvalidArgument):
            load("mujoco:HalfCheetah-v5")(**options)
    with pytest.raises(openenv.InvalidArgument):  # a Hopper keyword that fails only once the model moves
        load("mujoco:Hopper-v5")(healthy_z_range=5)
    with pytest.raises(LookupError, match="not a MuJoCo environment"):
        load("mujoco:CartPole-v1")


def test_a_mujoco_frame_is_rendered_on_request() -> None:
    """Offscreen OpenGL (MUJOCO_GL, EGL by default): a small frame, since rendering is the cost."""
    env = load("mujoco:Reacher-v5")(width=48, height=32)
    try:
        env.reset(seed=0)
        try:
            frame = env.render()
        except openenv.Unavailable as e:  # no OpenGL at all on this machine: said, not crashed
            pytest.skip(str(e))
        assert frame.shape == (32, 48, 3) and frame.dtype == np.uint8
        assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 4  # a scene, not a blank
    finally:
        env.close()


# --------------------------------------------------------------------------- Atari


def test_every_atari_entry_loads_with_its_frames_and_minimal_action_set() -> None:
    import ale_py

    for ident in ale.CURATED:
        cls = load(f"ale:{ident}")
        rgb = ident.endswith("/rgb")
        assert tuple(cls.observation_type.shape) == ((210, 160, 3) if rgb else (84, 84, 1))
        assert np.dtype(cls.observation_type.dtype) == np.uint8
        assert cls.action_type["maximum"] == len(cls.metadata["actions"]) - 1
        assert cls.metadata["kind"] == "atari"
    # The action sets the catalog lists without loading a ROM are the ROMs' minimal ones.
    for game, names in ale._CURATED_ACTIONS.items():
        probe = ale_py.ALEInterface()
        probe.setLoggerMode(ale_py.LoggerMode.Error)
        probe.loadROM(ale_py.roms.get_rom_path(ale._snake(game)))
        assert [a.name for a in probe.getMinimalActionSet()] == names.split(), game
    with pytest.raises(LookupError):
        load("ale:NoSuchGame")
    with pytest.raises(LookupError):
        load("ale:../../etc")


def _episode(env: Any, seed: int, actions: list[int]) -> list[tuple[float, bytes]]:
    env.reset(seed=seed)
    return [(r.reward, r.observation.tobytes()) for r in (env.step(a) for a in actions)]


def test_atari_is_seeded_sticky_actions_included_and_frameskip_is_an_option() -> None:
    cls = load("ale:Breakout")
    actions = [1, 2, 2, 3, 0, 1, 3, 3, 2, 1] * 4
    sticky, plain = cls(), cls(repeat_action_probability=0.0)
    try:
        first = _episode(sticky, 5, actions)
        assert _episode(sticky, 5, actions) == first  # same seed, same game (sticky draws too)
        assert _episode(sticky, 6, actions) != first  # the seed drives the sticky actions
        assert _episode(plain, 5, actions) == _episode(plain, 6, actions)  # no stickiness: deterministic
        r = sticky.reset(seed=1)
        assert r.observation.shape == (84, 84, 1) and r.observation.dtype == np.uint8
        assert sticky.step(0).metadata["episode_frame_number"] == 4
    finally:
        sticky.close()
        plain.close()
    two = cls(frameskip=2)
    try:
        two.reset(seed=0)
        assert two.step(0).metadata["episode_frame_number"] == 2
    finally:
        two.close()
    for options in (
        {"frameskip": 0},
        {"frameskip": 2.5},
        {"frameskip": float("inf")},
        {"max_num_frames_per_episode": float("nan")},
        {"repeat_action_probability": 1.5},
        {"repeat_action_probability": "high"},
        {"mode": 99},
        {"full_action_space": True},
    ):
        with pytest.raises(openenv.InvalidArgument):
            cls(**options)


def test_atari_frames_travel_as_tensors_and_batched_steps_match_single_ones() -> None:
    """One vectorised session of 3 games (``step_batch``) against 3 single sessions, seeded."""
    cls = load("ale:Pong/rgb")
    seeds, actions = [1, 2, 3], [[0, 1, 2], [3, 4, 5], [1, 1, 1], [2, 3, 4]]

    async def batched(env: Any) -> Any:
        await env.reset_batch(seeds=seeds)
        return [await env.step_batch(a) for a in actions]

    got = run(cls, batched, client=openenv.VectorEnvClient, num_envs=3)

    async def single(env: Any) -> Any:
        out = []
        for i, seed in enumerate(seeds):
            await env.reset(seed=seed)
            out.append([await env.step(a[i]) for a in actions])
        return out

    alone = run(cls, single)
    for t, batch in enumerate(got):
        for i, step in enumerate(batch.results):
            assert step.observation.shape == (210, 160, 3) and step.observation.dtype == np.uint8
            assert np.array_equal(step.observation, alone[i][t].observation)
            assert step.reward == alone[i][t].reward


def test_frames_are_pictures_for_the_web_playground() -> None:
    """``openenv.render`` on ``/ws`` (what ``/web`` asks after each step): an Atari game's RGB
    screen, the finance environment's SVG chart."""
    import websockets

    from openenv_catalog.finance import PortfolioEnvironment

    async def ask(factory: Any) -> list[dict[str, Any]]:
        host = openenv.Host(factory, "127.0.0.1", 0, http_port=0)
        await host.start()
        try:
            assert host.http_url is not None
            url = host.http_url.replace("http://", "ws://") + "/ws"
            async with websockets.connect(url, max_size=None) as ws:
                out = []
                for frame in ({"type": "reset", "data": {"seed": 3}}, {"type": "openenv.render"}):
                    await ws.send(json.dumps(frame))
                    out.append(json.loads(await ws.recv()))
                return out
        finally:
            await host.stop(1.0)

    _, picture = asyncio.run(asyncio.wait_for(ask(load("ale:Pong")), TIMEOUT))
    data = picture["data"]
    assert picture["type"] == "openenv.render" and data["mime"] == "image/x-raw-rgb"
    assert (data["height"], data["width"], data["channels"]) == (210, 160, 3)
    assert len(base64.b64decode(data["data"])) == 210 * 160 * 3
    _, chart = asyncio.run(asyncio.wait_for(ask(PortfolioEnvironment), TIMEOUT))
    assert chart["data"]["mime"] == "image/svg+xml" and "<polyline" in chart["data"]["data"]


def test_openenv_play_draws_a_frame_in_the_terminal() -> None:
    """What ``openenv play`` prints for a frame observation: brightness characters, 64 wide
    (the pseudo-terminal game itself is python/tests/test_play.py's; this is its picture)."""
    from openenv.cli.play import _lines, _readable

    env = load("ale:Breakout")()
    try:
        lines = _lines(_readable(env.reset(seed=0).observation), 1, top=True)
    finally:
        env.close()
    assert lines[0].strip().startswith("(84x84x1 uint8 frame")
    rows = [line[2:] for line in lines[1:]]
    assert len(rows) == 32 and {len(r) for r in rows} == {64}
    assert len(set("".join(rows))) >= 3  # walls, bricks and background, not one shade
