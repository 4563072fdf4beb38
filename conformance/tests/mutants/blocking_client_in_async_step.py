"""Rule broken: a step in progress never delays the other sessions of the server, and a step
timeout fires when it elapses (docs/protocol.md §3.5, liveness). The environment's
``async def step`` calls a synchronous client before it answers (a 30 ms ``time.sleep``, the
shape of a blocking HTTP request made from a coroutine): the server's event loop is held for
30 ms on every step, so every other session waits that long, and a step sent with a 1 us
timeout is answered with its time step after 30 ms.

Unlike ``blocks_event_loop`` (a 25 s block, only for steps with a timeout, caught by the check's
absolute bound), every step blocks, whatever it carries, and only briefly: it is caught by the
measured probe (another session's wait during steps against the same probe with no step
running), never by a fixed bound. Deterministic: the block depends on nothing but the step
request. Certified at the ``concurrency`` level only, which keeps its run short."""

import time

from mutants.base import Counter

CAUGHT_BY = "concurrency.event_loop_live"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("concurrency",)

CLIENT_CALL_S = 0.030  # a synchronous request to a remote service, made on the event loop


class Env(Counter):
    async def step(self, action):
        time.sleep(CLIENT_CALL_S)  # blocking, inside a coroutine: nothing else on the loop runs meanwhile
        return Counter.step(self, action)


#: What the check's reason must say: the rule and the blocking hook.
CAUGHT_SAYING = ("blocks the server's event loop", "step")
