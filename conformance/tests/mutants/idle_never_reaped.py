"""Rule broken: sessions idle for longer than Capabilities.idle_timeout are ended by the server
(docs/protocol.md §3.7). The server advertises a 2 s idle timeout but never reaps."""

import openenv.runtime.session as _session
from mutants.base import Counter as Env

CAUGHT_BY = "concurrency.idle_reaped"
COLLATERAL: frozenset[str] = frozenset()
SERVER_KWARGS = {"idle_timeout_s": 2.0}


def _no_reaper(self):
    return None


_session.SessionManager.start_reaper = _no_reaper

__all__ = ["Env"]
