"""Rule broken: GetLoad counts the sessions open (docs/rfcs/0005-server-load.md). The server
advertises load_reporting but always reports an idle server, which would draw every fleet
client's sessions to it."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "protocol.load"
COLLATERAL: frozenset[str] = frozenset()


class Wire(Proxy):
    def load_of(self, load):
        load.load.sessions_open = 0
        load.load.sessions_opened_total = 0
        return load


__all__ = ["Env", "Wire"]
