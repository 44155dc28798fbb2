"""`sim queue --tenants`: several tenants share a replay, each with a fair-share weight.

The trace's jobs are dealt to the tenants by a seeded draw, evenly, so every tenant asks for about as much;
a policy that orders by fair share (`suanli`, the server's queues) then gives each a share of the GPUs near
its weight's while all of them wait, and the FIFO baselines give each about what it asks.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

from suanli.domain.fair_share import MAX_WEIGHT, MIN_WEIGHT
from suanli.domain.request import Request


def parse_tenants(text: str) -> dict[str, float]:
    """`a=2,b=1` as tenant -> fair-share weight (the server's range: `MIN_WEIGHT` to `MAX_WEIGHT`)."""
    tenants: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        try:
            weight = float(value)
        except ValueError:
            raise ValueError(f"--tenants {text!r}: {part!r} is not NAME=WEIGHT") from None
        if not name or name in tenants:
            raise ValueError(f"--tenants {text!r}: each tenant is named once ({part!r})")
        if not (math.isfinite(weight) and MIN_WEIGHT <= weight <= MAX_WEIGHT):
            raise ValueError(f"--tenants {text!r}: a weight is from {MIN_WEIGHT:g} to {MAX_WEIGHT:g}")
        tenants[name] = weight
    if len(tenants) < 2:
        raise ValueError(f"--tenants {text!r}: name two tenants or more (one tenant has all the share)")
    return tenants


def deal_to_tenants(requests: Sequence[Request], tenants: Sequence[str], seed: int) -> list[Request]:
    """Each request given to one of `tenants`, drawn evenly with `seed`."""
    rng = random.Random(f"tenants:{seed}")
    return [replace(r, tenant=rng.choice(tenants)) for r in requests]
