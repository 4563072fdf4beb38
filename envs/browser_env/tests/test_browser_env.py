"""The browser environment with a real Chromium (Debian's) and the real MiniWoB++ pages: a
scripted policy that reads the accessibility tree wins tasks by MiniWoB++'s own checker, every
task of the split resets, forged wins are refused, sessions have their own pages, a killed
Chromium is replaced. One Chromium per lane is shared by the whole module (the lanes live as
long as the process). Needs ``chromium`` (.ci/run installs it): skipped with the reason
without it, failed when CI is set."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import openenv
import openenv.testing

try:
    from browser_env import TASKS, BrowserEnvironment, browser, policy, screenshot
    from browser_env.v1.browser_env_pb2 import Observation

    if browser.chromium_path() is None:
        raise RuntimeError("Chromium is not installed (apt-get install chromium)")
except (ImportError, RuntimeError) as e:  # pragma: no cover - depends on the machine
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        raise
    pytest.skip(str(e), allow_module_level=True)

pytestmark = pytest.mark.xdist_group("browser_env")  # one worker: its Chromium stays up for the module

WINS = ("click-test", "click-button", "enter-text", "enter-password", "focus-text")
#: Reset options of an episode whose steps' metadata keep the checker's raw reward (RFC 0015).
RICH = {"feedback": "rich"}

# One Chromium for the whole module (sessions still get a browser context each): cheaper, and
# the isolation test then shows contexts of one browser apart.
browser.LANES = 1


@pytest.fixture(scope="module")
def env() -> Iterator[Any]:
    """One in-process server (the protocol engine, the wire's codecs) for the module."""
    with openenv.testing.sync_client(BrowserEnvironment, max_sessions=4) as client:
        yield client


def _obs(r: Any) -> Observation:
    assert isinstance(r.observation, Observation)
    return r.observation


def test_the_scripted_policy_wins_tasks_by_miniwobs_checker_over_grpc() -> None:
    """The CI criterion: a scripted policy plays MiniWoB++ tasks to success over a real gRPC
    server; the reward is the page's checker's (its raw reward in a rich episode's metadata)."""

    async def main() -> list[tuple[str, float | None, bool, Any]]:
        out = []
        async with openenv.Server(BrowserEnvironment, "127.0.0.1", 0) as srv:
            async with openenv.EnvClient(srv.address) as client:
                for i, task in enumerate(WINS):
                    r = await client.reset(seed=100 + i, task_id=task, options={"feedback": "rich"})
                    obs = _obs(r)
                    action = policy.act(obs.task, obs.goal, obs.axtree)
                    s = await client.step(action)
                    out.append((task, s.reward, s.terminated, dict(s.metadata)))
        return out

    for task, reward, terminated, meta in asyncio.run(asyncio.wait_for(main(), 240)):
        assert (task, reward, terminated) == (task, 1.0, True), meta
        assert meta["miniwob_raw_reward"] > 0


def test_every_task_of_the_split_resets_with_goal_tree_and_screenshot(env: Any) -> None:
    listed = env.list_tasks()
    ids = [t.id for t in listed]
    assert ids == list(TASKS) and len(ids) >= 20
    for i, task in enumerate(ids):
        r = env.reset(seed=i, task_id=task)
        obs = _obs(r)
        assert obs.task == task and obs.goal and not obs.last_action_error
        assert obs.axtree.startswith("RootWebArea"), obs.axtree[:200]
        img = screenshot(obs)
        assert img.shape == (321, 498, 3) and img.dtype == np.uint8
        assert img.std() > 0, f"{task}: a blank screenshot"
        assert env.state().state["task"] == task


def test_the_same_seed_gives_the_same_task_instance(env: Any) -> None:
    a = _obs(env.reset(seed=7, task_id="enter-text"))
    b = _obs(env.reset(seed=7, task_id="enter-text"))
    c = _obs(env.reset(seed=7))  # the seed chooses the task too
    d = _obs(env.reset(seed=7))
    assert (a.goal, a.axtree) == (b.goal, b.axtree)
    assert (c.task, c.goal) == (d.task, d.goal)


def test_a_wrong_click_loses_by_the_checker(env: Any) -> None:
    for seed in range(3, 30):  # an instance with more than one button
        obs = _obs(env.reset(seed=seed, task_id="click-button", options=RICH))
        right = policy.act(obs.task, obs.goal, obs.axtree)
        others = [n for n in policy.nodes(obs.axtree) if n.role == "button" and f"'{n.bid}'" not in right]
        if others:
            break
    wrong = others[0]
    s = env.step(f"click('{wrong.bid}')")
    assert s.reward == 0.0 and s.terminated
    assert s.metadata["miniwob_raw_reward"] < 0


def test_strict_steps_keep_the_checkers_raw_reward_and_reason_to_rich_episodes(env: Any) -> None:
    """RFC 0015: every step is graded; strict (the default) leaves a step's metadata the public
    keys only. unicode-test's checker explains a wrong click with the right button's name: in a
    rich episode that reason is in the metadata, in a strict one nothing of the checker is, and
    two non-winning actions leave the same metadata. The observation is the page: its text
    holds neither the reason nor MiniWoB++'s human display (last reward, time left)."""
    caps = env.info.capabilities
    assert caps.grades and caps.feedback == 1 and list(caps.feedback_offered) == [1, 2]  # strict; strict, rich
    for seed in range(40):  # an instance with more than one button
        obs = _obs(env.reset(seed=seed, task_id="unicode-test"))
        right = obs.goal.split('"')[1]  # 'Click on the "Cancél" button.'
        wrong = [n for n in policy.nodes(obs.axtree) if n.role == "button" and n.name != right]
        if wrong:
            break
    assert wrong, "no unicode-test instance with a wrong button in 40 seeds"
    quiet = [env.step(a) for a in ("noop(0)", "scroll(0, 10)")]
    assert [(s.reward, s.terminated, dict(s.metadata)) for s in quiet] == [(0.0, False, {})] * 2
    strict = env.step(f"click('{wrong[0].bid}')")
    assert (strict.reward, strict.terminated) == (0.0, True)
    assert set(strict.metadata) <= {"task", "seed", "task_error", "browser_crashed"}  # the public keys
    assert strict.reward_breakdown is None
    env.reset(seed=seed, task_id="unicode-test", options=RICH)
    rich = env.step(f"click('{wrong[0].bid}')")
    assert (rich.reward, rich.terminated) == (0.0, True)
    assert rich.metadata["miniwob_raw_reward"] == -1
    assert rich.metadata["reason"].endswith(f"should have clicked on {right}")
    for o in (obs, _obs(strict), _obs(rich)):
        text = "\n".join((o.goal, o.axtree, o.last_action_error))
        for hidden in ("should have clicked", "Last reward", "Time left", "WOB_"):
            assert hidden not in text, (hidden, text[:300])


FORGERIES = (
    "page.evaluate('WOB_RAW_REWARD_GLOBAL = 1; WOB_REWARD_GLOBAL = 1; WOB_DONE_GLOBAL = true')",
    "evaluate('core.endEpisode(1.0)')",
    "click('13'); page.evaluate('core.endEpisode(1.0)')",
    "noop(0)\nimport os",
    "noop(0) or __import__('os').system('true')",
    "click(__import__('os').getcwd())",
    "goto('javascript:core.endEpisode(1.0)')",
    "goto('file:///etc/passwd')",
    "new_tab()",
    "upload_file('14', '/etc/passwd')",
    "send_msg_to_user('done')",
    "report_infeasible('no')",
    "noop(100000000)",
    "fill('14', '" + "x" * 2000 + "')",
    "exec('WOB_DONE_GLOBAL=1')",
    "",
)


def test_forged_wins_are_refused_in_band_and_the_checker_still_decides(env: Any) -> None:
    obs = _obs(env.reset(seed=5, task_id="enter-text", options=RICH))
    for forged in FORGERIES:
        s = env.step(forged) if forged else env.step(" ")
        o = _obs(s)
        assert o.last_action_error.startswith("refused: "), (forged[:80], o.last_action_error)
        assert s.reward == 0.0 and not s.terminated and not s.truncated, forged[:80]
        assert s.metadata["miniwob_raw_reward"] == 0, forged[:80]
    # The page is untouched: the real answer still wins, by the page's checker.
    s = env.step(policy.act(obs.task, obs.goal, _obs(s).axtree))
    assert (s.reward, s.terminated) == (1.0, True)


def test_an_action_that_fails_in_the_page_is_reported_in_band(env: Any) -> None:
    env.reset(seed=1, task_id="click-test")
    s = env.step("click('no-such-bid')")
    assert "Could not find element" in _obs(s).last_action_error
    assert s.reward == 0.0 and not s.terminated
    assert env.state().step_count == 1  # counted: the episode goes on


def test_sessions_have_their_own_pages() -> None:
    async def main() -> None:
        async with openenv.testing.InProcessServer(BrowserEnvironment, max_sessions=4) as server:
            async with server.client() as a, server.client() as b:
                ra, rb = await asyncio.gather(
                    a.reset(seed=1, task_id="enter-text"), b.reset(seed=2, task_id="click-test")
                )
                oa, ob = _obs(ra), _obs(rb)
                assert (oa.task, ob.task) == ("enter-text", "click-test")
                # b wins its task; a's page is not touched by it
                sb = await b.step(policy.act(ob.task, ob.goal, ob.axtree))
                assert sb.reward == 1.0, _obs(sb).last_action_error
                sa = await a.step("noop(0)")
                assert _obs(sa).axtree == oa.axtree and sa.reward == 0.0
                sa = await a.step(policy.act(oa.task, oa.goal, oa.axtree))
                assert sa.reward == 1.0, _obs(sa).last_action_error

    asyncio.run(asyncio.wait_for(main(), 120))


def test_a_closed_session_leaves_no_browser_context_behind() -> None:
    """Each session's context (and its renderer processes) is closed with the session: a leak
    here grew a server's Chromium by ~270 MB per session until its container thrashed."""

    def contexts() -> int:  # open contexts over every lane's Chromium (this module: one lane)
        return sum(lane.call(lambda lane=lane: len(lane.browser().contexts)) for lane in list(browser._lanes))

    async def main() -> None:
        before = await asyncio.to_thread(contexts)  # the module's other sessions (the env fixture)
        async with openenv.testing.InProcessServer(BrowserEnvironment, max_sessions=4) as server:
            for round_ in range(3):
                async with server.client() as a, server.client() as b:
                    await asyncio.gather(a.reset(seed=round_, task_id="click-test"), b.reset(seed=round_))
                    assert await asyncio.to_thread(contexts) == before + 2
                # Closed by the clients: the server ends both sessions, each closes its context.
                for _ in range(100):
                    if await asyncio.to_thread(contexts) == before:
                        break
                    await asyncio.sleep(0.05)
                assert await asyncio.to_thread(contexts) == before, f"round {round_}: contexts left open"

    asyncio.run(asyncio.wait_for(main(), 180))


def test_a_killed_chromium_ends_the_episode_and_is_replaced(env: Any) -> None:
    obs = _obs(env.reset(seed=9, task_id="click-test"))
    pids = [p for p in (lane.browser_pid() for lane in list(browser._lanes)) if p is not None]
    assert pids, "no Chromium process found"
    for pid in pids:  # the Chromium processes this test module's lanes started
        os.kill(pid, signal.SIGKILL)
    s = env.step(policy.act(obs.task, obs.goal, obs.axtree))
    assert s.truncated and s.reward == 0.0
    assert "crashed" in _obs(s).last_action_error
    # A reset starts a new Chromium; the task plays again.
    obs = _obs(env.reset(seed=9, task_id="click-test"))
    s = env.step(policy.act(obs.task, obs.goal, obs.axtree))
    assert (s.reward, s.terminated) == (1.0, True)


def test_the_tool_facade_for_harnesses_wins_by_the_checker() -> None:
    """browser_env.harness (what `openenv harness run` drives): the reset's text shows the goal
    and the tree; each `act` call is a step rewarded by the checker. Every step is graded and
    `act` is no grading tool (its result is the page the agent acts on, kept in strict episodes,
    the default); its grading probes (click-test) earn 1 for the click and 0 for waiting."""
    from browser_env.harness import BrowserToolEnvironment

    with openenv.testing.sync_client(BrowserToolEnvironment, client_cls=openenv.ToolEnvClient) as tools:
        caps = tools.info.capabilities
        assert caps.grades and caps.feedback == 1 and list(caps.feedback_offered) == [1, 2]  # strict by default
        for probe in BrowserToolEnvironment.grading_probes():
            for calls, want in ((probe.reference, 1.0), *((n, 0.0) for n in probe.null)):
                tools.reset(seed=probe.seed, task_id=probe.task_id)
                for call in calls or ():
                    s = tools.step(call)
                assert s.reward == want, (probe, calls)
        r = tools.reset(seed=2, task_id="click-button")
        assert r.observation is not None
        text = r.observation.result.text
        assert text.startswith("Goal: Click on the") and "Accessibility tree:" in text
        goal = text.split("\n", 1)[0].removeprefix("Goal: ")
        action = policy.act("click-button", goal, text)
        (act,) = tools.list_tools()
        assert act.name == "act" and "openenv/grading" not in (act.annotations or {})
        s = tools.step(openenv.CallToolAction("act", {"action": "goto('javascript:core.endEpisode(1)')"}))
        assert s.observation is not None
        assert s.reward == 0.0 and not s.terminated and "refused" in s.observation.result.text
        s = tools.step(openenv.CallToolAction("act", {"action": action}))
        assert (s.reward, s.terminated) == (1.0, True)
        assert s.observation is not None
        assert s.observation.result.text.startswith("reward: 1; task over: yes")
        # Strict: the page stays, the checker's detail does not reach the metadata.
        assert "Accessibility tree:" in s.observation.result.text
        assert "reason" not in s.metadata and "miniwob_raw_reward" not in s.metadata


def _plays_click_test_to_a_win(env: BrowserEnvironment) -> None:
    """A reset of ``env`` (an environment object, not a client) whose episode the policy wins."""
    obs = env.reset(seed=4, options={"task_id": "click-test"}).observation
    assert obs is not None
    s = env.step(policy.act(obs.task, obs.goal, obs.axtree))
    assert (s.reward, s.terminated) == (1.0, True)


def test_a_stuck_chromium_is_killed_by_the_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    """A browser call that never returns (here: a page spinning in JavaScript, which no action
    can cause) is ended by the lane's watchdog killing Chromium; the episode ends, a reset works."""
    monkeypatch.setattr(browser, "STUCK_S", 3.0)
    env = BrowserEnvironment()
    try:
        obs = env.reset(seed=4, options={"task_id": "click-test"}).observation
        lane = env._lane
        assert lane is not None and obs is not None
        kills = lane.watchdog_kills
        with pytest.raises(Exception, match=r"(?i)closed|crash|disconnect"):
            lane.call(lambda: env._page.evaluate("() => { while (true) {} }"))
        assert lane.watchdog_kills == kills + 1
        assert env.step("noop(0)").truncated
        _plays_click_test_to_a_win(env)
    finally:
        env.close()


def test_a_task_page_that_does_not_load_in_time_is_unavailable_and_a_later_reset_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reset whose page misses Playwright's deadline (a loaded machine) is tried once more in a
    new context, then refused UNAVAILABLE saying so (retryable, not an INTERNAL crash); with
    time to load, the next reset of the same environment plays."""
    import browser_env.server

    env = BrowserEnvironment()
    try:
        monkeypatch.setattr(browser_env.server, "DEFAULT_TIMEOUT_MS", 1)  # no page loads in 1 ms
        with pytest.raises(openenv.errors.Unavailable, match=r"did not load within 0\.001 s, twice"):
            env.reset(seed=4, options={"task_id": "click-test"})
        monkeypatch.undo()
        _plays_click_test_to_a_win(env)
    finally:
        env.close()
