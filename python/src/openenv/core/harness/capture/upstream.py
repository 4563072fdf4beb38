"""A trainer's sampling policy for captured calls (OpenEnv 0.10's ``training_sampling``).

On-policy training needs the sampled tokens' logprobs under the policy's own distribution: a
truncated one (``top_p`` < 1, ``top_k``, ``min_p``) or a penalised one gives logprobs of another
distribution, and every importance ratio computed from them is off. A trainer therefore pins a
policy: a positive temperature and every truncating knob at its no-op value. The capture proxy
(:class:`openenv.harness.CaptureProxy` ``sampling=``) then sets those fields in every call the
agent makes, and records that it did (RFC 0017)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["NON_POLICY_SAMPLING", "training_sampling"]

NON_POLICY_SAMPLING: dict[str, float | int] = {
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
}
"""The knobs that narrow or distort the sampling distribution, each at the value that disables it
(``top_k`` -1 is vLLM's "off"; 0, other servers' "off", is accepted as input too)."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def training_sampling(sampling: Mapping[str, Any] | None) -> dict[str, float | int]:
    """The full sampling policy to pin for a training session, from a trainer's settings.

    ``None`` is no policy (``{}``: the harness's own sampling stands, fit for evaluation only).
    Otherwise ``temperature`` must be a finite positive number and every other field one of
    :data:`NON_POLICY_SAMPLING` at its no-op value; anything else raises ``ValueError`` naming the
    field, since sampling from a truncated distribution cannot be made on-policy afterwards.
    Returns the temperature with every no-op knob spelled out."""
    if sampling is None:
        return {}
    if not isinstance(sampling, Mapping):
        raise ValueError("sampling must be a mapping of field to value")
    unknown = sorted(set(sampling) - {"temperature", *NON_POLICY_SAMPLING})
    if unknown:
        raise ValueError(f"unsupported training sampling fields: {', '.join(unknown)}")
    temperature: Any = sampling.get("temperature")
    if not _number(temperature) or not 0 < float(temperature) < math.inf:
        raise ValueError("training sampling requires a finite positive temperature")
    for key, value in sampling.items():
        if key == "temperature":
            continue
        if not _number(value):
            raise ValueError(f"training sampling {key} must be a number")
        if key == "top_k" and value == 0:
            continue
        if value != NON_POLICY_SAMPLING[key]:
            raise ValueError(f"training sampling requires {key}={NON_POLICY_SAMPLING[key]} (got {value})")
    return {"temperature": float(temperature), **NON_POLICY_SAMPLING}
