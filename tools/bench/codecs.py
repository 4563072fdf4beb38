"""Codec micro benchmark: encode + decode of one gridworld message through the runtime's codec
(``codec_for(declared).encode`` to a ``Payload``, then ``.decode``), declared as the ``_pb2``
class (upb) and as the betterproto2 dataclass of the same message (the betterproto facade).

``python tools/bench/codecs.py [--repeats 5]`` prints one JSON line: a list of rows with the
median µs per encode + decode over ``--repeats`` timeit repeats (no I/O, one core).
"""

from __future__ import annotations

import argparse
import json
import statistics
import timeit
from typing import Any

from gridworld import facade
from gridworld.v1 import gridworld_pb2
from openenv.runtime.codec import codec_for


def _messages() -> dict[str, tuple[Any, Any]]:
    """name -> (_pb2 value, the same value as a betterproto2 dataclass): what a gridworld step carries."""
    grid = [
        "#########",
        "#A..#...#",
        "#.#.#.#.#",
        "#.#...#.#",
        "#.#####.#",
        "#...#...#",
        "###.#.#.#",
        "#.....#G#",
        "#########",
    ]
    pb_obs = gridworld_pb2.Observation(
        agent=gridworld_pb2.Position(row=1, col=1), goal=gridworld_pb2.Position(row=7, col=7), grid=grid, bumped=True
    )
    bp_obs = facade.Observation(
        agent=facade.Position(row=1, col=1), goal=facade.Position(row=7, col=7), grid=grid, bumped=True
    )
    return {
        "Action": (gridworld_pb2.Action(move=gridworld_pb2.MOVE_RIGHT), facade.Action(move=facade.Move.RIGHT)),
        "Observation (9x9)": (pb_obs, bp_obs),
    }


def measure(repeats: int = 5) -> list[dict[str, Any]]:
    rows = []
    for name, (pb, bp) in _messages().items():
        for types, value in (("pb2 (upb)", pb), ("betterproto2", bp)):
            codec = codec_for(type(value))
            assert codec.decode(codec.encode(value)) == value

            def round_trip(codec: Any = codec, value: Any = value) -> None:
                codec.decode(codec.encode(value))

            number, _ = timeit.Timer(round_trip).autorange()
            runs = [t / number * 1e6 for t in timeit.repeat(round_trip, number=number, repeat=repeats)]
            size = len(codec.encode(value).message.value)
            rows.append(
                {
                    "message": name,
                    "types": types,
                    "us_per_encode_decode": statistics.median(runs),
                    "bytes": size,
                    "runs_us": [round(r, 2) for r in runs],
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    print(json.dumps(measure(ap.parse_args().repeats)), flush=True)


if __name__ == "__main__":
    main()
