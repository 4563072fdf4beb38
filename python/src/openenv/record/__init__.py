"""Rollout recording (the ``collect`` extra: ``pip install 'protoenv[collect]'``).

* :class:`Recorder`: wrap a client, play as usual, every time step is recorded;
* :func:`collect`: N episodes on K sessions with a policy (``openenv collect``), resumable;
* :func:`load` / :func:`read_rows`: the records back, as a ``datasets.Dataset`` or dicts;
* :func:`push_to_hub`: upload a record file as a Hugging Face dataset.

The format (one row per time step, JSONL or Parquet) is :mod:`openenv.record.rows`'.
"""

from openenv.record.collect import CollectStats, EpisodeHooks, OtherRunError, collect, run_id
from openenv.record.hub import push_to_hub
from openenv.record.policies import STOP, OpenAIPolicy, PolicyContext, RandomPolicy, load_policy
from openenv.record.recorder import Recorder
from openenv.record.rows import SCHEMA, decode_row, to_jsonable
from openenv.record.store import RecordStore, load, read_rows

__all__ = [
    "SCHEMA",
    "STOP",
    "CollectStats",
    "EpisodeHooks",
    "OpenAIPolicy",
    "OtherRunError",
    "PolicyContext",
    "RandomPolicy",
    "RecordStore",
    "Recorder",
    "collect",
    "decode_row",
    "load",
    "load_policy",
    "push_to_hub",
    "read_rows",
    "run_id",
    "to_jsonable",
]
