"""`sim queue --contract`: capacity sold ahead as a compute future, replayed as the server holds it.

The jobs the tier mix draws `reserved` become one tenant's, which holds a contract for a number of GPUs of one
pool over the whole replay. They ask on-demand, as a holder's rentals do on the server; the cycle promotes
them to reserved up to the contracted count, keeps on-demand off the capacity held for them, and preempts
spot that borrowed it when they claim it. What a planner reads: what selling that much of the fleet ahead
costs the other tenants' jobs, and how soon the holder's start.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from suanli.domain.contracts import Contract, Pool, fleet_capacity
from suanli.domain.inventory import Fleet
from suanli.domain.request import Request, Tier

HOLDER = "contract-holder"  # the tenant the contract is sold to: the mix's reserved jobs
CONTRACT_LABEL = "contract"  # the holder's jobs in the per-tier figures (reserved up to the count)


def parse_contract(text: str, fleet: Fleet) -> tuple[Pool, int]:
    """`GPUS` (the fleet's one pool) or `MODEL@REGION=GPUS` as (pool, GPUs), checked against the fleet."""
    pools = fleet_capacity(fleet)
    where, _, count = text.rpartition("=")
    try:
        gpus = int(count)
    except ValueError:
        raise ValueError(f"--contract {text!r}: give GPUS or MODEL@REGION=GPUS") from None
    if where:
        model, at, region = where.partition("@")
        if not at or not model or not region:
            raise ValueError(
                f"--contract {text!r}: the pool is MODEL@REGION, e.g. H100-SXM-80GB@{region or 'sim'}"
            )
        pool = (model, region)
        if pool not in pools:
            names = ", ".join(f"{m}@{r}" for m, r in sorted(pools))
            raise ValueError(f"--contract {text!r}: the fleet has no {model} in {region} (it has {names})")
    elif len(pools) == 1:
        (pool,) = pools
    else:
        names = ", ".join(f"{m}@{r}" for m, r in sorted(pools))
        raise ValueError(
            f"--contract {text!r}: the fleet has several pools ({names}); give MODEL@REGION=GPUS"
        )
    capacity = pools.get(pool, 0)
    if not 1 <= gpus <= capacity:  # held over the whole replay: at most the pool, and nothing is down
        raise ValueError(
            f"--contract {text!r}: GPUS is 1 to the {capacity} GPUs of {pool[0]} in {pool[1]}, not {gpus}"
        )
    return pool, gpus


def sell_contract(requests: Sequence[Request], pool: Pool, gpus: int) -> tuple[list[Request], Contract]:
    """`requests` with the reserved ones as the holder's on-demand requests, and the holder's contract, open
    from the first arrival on."""
    if not any(r.tier is Tier.RESERVED for r in requests):
        raise ValueError(
            "--contract: the tier mix draws no reserved jobs for the holder (add reserved=SHARE to --mix)"
        )
    sold = [
        replace(r, tenant=HOLDER, tier=Tier.ON_DEMAND) if r.tier is Tier.RESERVED else r for r in requests
    ]
    return sold, _contract(pool, gpus, min(r.submitted_at_s for r in requests))


def tier_label(request: Request, holders: frozenset[str]) -> str:
    """A job's row in the per-tier figures: `contract` for a holder's, else the tier it asked for."""
    return CONTRACT_LABEL if request.tenant in holders else request.tier.label


def _contract(pool: Pool, gpus: int, start_s: float) -> Contract:
    model, region = pool
    return Contract("sim-contract", HOLDER, model, region, gpus, start_s, math.inf)
