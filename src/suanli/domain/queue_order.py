"""How a cycle orders its queue: the policy's settings (`QueueConfig`, the platform's presets) and the order
they give, for the walk (`order_requests`, `keep_head_first`) and for backfill candidates (`backfill_key`)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from suanli.domain.fair_share import FairShare
from suanli.domain.preemption import PreemptionConfig
from suanli.domain.request import Request
from suanli.domain.running import Running


class Mode(StrEnum):
    GREEDY = "greedy"  # a cloud's on-demand: whatever fits starts, in order; no request waits for a head
    STRICT = "strict"  # nothing passes a blocked head
    BACKFILL = "backfill"  # EASY: requests with a declared duration may pass if they cannot delay the head
    CONSERVATIVE = "conservative"  # Slurm's backfill: a request may pass only if it delays no one before it


class Order(StrEnum):
    FIFO = "fifo"  # arrival order only
    PRIORITY = "priority"  # tier, spot bid, weighted fair share, age


class BackfillOrder(StrEnum):
    QUEUE = "queue"  # candidates tried in queue order (Slurm, EASY as published)
    SHORTEST = "shortest"  # shortest declared GPU-time first: more small jobs fill the holes before the head
    SHORTEST_TIME = "shortest-time"  # shortest declared duration first, whatever the size
    RATIO = "ratio"  # highest response ratio (wait + declared) / declared first: short jobs, but none starves


class Within(StrEnum):
    AGE = "age"  # oldest first within a tenant's (tier, bid) class
    RATIO = "ratio"  # highest response ratio (wait + declared) / declared first: short first, none starves


UNDECLARED_S = 7 * 24 * 3600.0  # what RATIO assumes for a request without a declared duration


@dataclass(frozen=True, slots=True)
class QueueConfig:
    mode: Mode = Mode.BACKFILL
    order: Order = Order.PRIORITY
    within: Within = Within.AGE
    backfill_order: BackfillOrder = BackfillOrder.QUEUE
    weights: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    preemption: PreemptionConfig | None = None
    keep_head: bool = False  # the last cycle's blocked head stays first in its class until it starts
    spare_free: bool = False  # reserve the head on nodes busy now, leaving GPUs free now to backfill
    spot_yields: bool = False  # no spot starts in a cycle where a higher tier waits for capacity
    backfill_window_s: float = 24 * 3600.0  # CONSERVATIVE: latest booked start (Slurm bf_window)
    backfill_depth: int = 500  # CONSERVATIVE: requests planned per cycle (Slurm bf_max_job_test)
    # CONSERVATIVE: book every request even while no GPU is free, so each shows its start (the server); a
    # replay skips those bookings, which start nothing (its decisions are the same, ten times as fast)
    book_when_full: bool = False
    # RATIO: a request's cost is its declared duration times (1 + this x the share of its pool it takes), so
    # a rental that holds the whole pool ages more slowly than one GPU for as long (see `response_ratio`)
    width_weight: float = 0.0
    # the oldest request that needs whole nodes and takes at most this share of its pool goes first in its
    # (tier, bid) class, so its drain starts while narrower requests wait to fill it (0: off; see
    # `oldest_wide`)
    wide_first_share: float = 0.0
    # RATIO backfill: a candidate's cost is never taken below this, so the ones declared shorter rank by
    # their wait and the newest short ones stay queued for the next drain (`backfill_key`)
    backfill_floor_s: float = 0.0
    fill_drain_first: bool = False  # a backfill that ends in time goes to the head's drained nodes first
    # RATIO: a request's cost is never taken above this, so a long or wide request's ratio still grows
    # by at least its wait over this each second, and it heads the queue within a bounded multiple of it
    ratio_cost_cap_s: float = math.inf
    # requests declared longer than this may run on at most the nodes of their pool less those the widest
    # request (waiting or running) needs, at least one node, and leave one node to short requests; they go
    # to nodes that long requests already hold first (`long_jobs.py`): the widest request's drain never
    # waits on a week-long job
    long_job_s: float = math.inf
    # a request that checkpoints (`Request.checkpoints`) and would otherwise wait while GPUs idle (it would
    # delay the blocked head, or the long-job budget holds it back) starts on them anyway, borrowed: the
    # first request of the walk that does not fit takes it back with notice, and it resumes later
    borrow_idle: bool = False
    # a request that declares `min_gpus` and does not fit whole starts at the largest smaller size that
    # fits (fewer GPUs on one node, fewer nodes of a gang) instead of waiting; it becomes the head only if
    # it fits at no size (`elastic_start.py`; the caller grows it toward its size as capacity frees)
    elastic_start: bool = False


# The platform's queueing policy (`sim queue`'s `suanli`; the server's `SUANLI_QUEUE=backfill`): tier,
# spot bid, weighted fair share, then the highest response ratio, its cost weighted by the share of the pool
# a request takes (width_weight 3: the whole pool counts 4 times its duration); EASY backfill with
# candidates by the same ratio, those that end before the head's start going to its drained nodes first;
# the blocked head keeps its place and its drained nodes, reserved on nodes busy now; spot does not start
# while a higher tier waits; lower tiers are preempted with notice. A request's cost in the ratio is at most
# 72 h, and requests declared over 24 h hold at most the nodes the widest request leaves (docs/queueing.md:
# on ITP cluster03 this lifts allocation above Slurm's and keeps the lowest JCT).
PLATFORM_QUEUE = QueueConfig(
    mode=Mode.BACKFILL,
    order=Order.PRIORITY,
    within=Within.RATIO,
    backfill_order=BackfillOrder.RATIO,
    preemption=PreemptionConfig(),
    keep_head=True,
    spare_free=True,
    spot_yields=True,
    width_weight=3.0,
    fill_drain_first=True,
    ratio_cost_cap_s=72 * 3600.0,
    long_job_s=24 * 3600.0,
    borrow_idle=True,
    elastic_start=True,
)


# An allocation-first variant of the platform's policy, for the simulator only (`sim queue`'s
# `suanli-wide-first`): the oldest request needing whole nodes and at most 5/8 of its pool goes first, and
# backfill candidates declared under 64 h rank by their wait. It trades short jobs' waits for fuller
# drains; a steady stream of whole-node jobs keeps narrow ones from ever heading the queue (docs/queueing.md).
# (It was measured without the ratio cap and the long-job budget, which it leaves off.)
WIDE_FIRST_QUEUE = replace(
    PLATFORM_QUEUE,
    wide_first_share=5 / 8,
    backfill_floor_s=64 * 3600.0,
    ratio_cost_cap_s=math.inf,
    long_job_s=math.inf,
)


# The server's `SUANLI_QUEUE=greedy` (its default): tier, spot bid, weighted fair share, then age; every
# request that fits starts, none is held for a larger one before it; lower tiers are preempted with notice;
# a rental that declares a least size starts at the largest that fits when it does not fit whole.
GREEDY_QUEUE = QueueConfig(
    mode=Mode.GREEDY, order=Order.PRIORITY, preemption=PreemptionConfig(), elastic_start=True
)


# The server's `SUANLI_QUEUE=conservative`: tier, spot bid, weighted fair share, then age, with Slurm's
# conservative backfill, so every pending rental (up to the depth) has a start no rental ranked after it can
# delay (the plan is made again each cycle in that order, as Slurm's: a higher tier, or a tenant whose fair
# share has room, ranks ahead and may move it);
# spot does not start while a higher tier waits; lower tiers are preempted with notice; a rental that declares
# a least size starts smaller off every booking it would outlast.
BOOKED_QUEUE = QueueConfig(
    mode=Mode.CONSERVATIVE,
    order=Order.PRIORITY,
    preemption=PreemptionConfig(),
    spot_yields=True,
    elastic_start=True,  # off every booking it would outlast: the bookings stay promises
)


def order_requests(
    queue: Iterable[Request],
    config: QueueConfig,
    fair: FairShare,
    running: Sequence[Running] = (),
    now: float = 0.0,
    pool_share: Callable[[Request], float] | None = None,
) -> list[Request]:
    """The cycle's order. PRIORITY: tier, spot bid, then tenants merged by weighted fair share, then age
    (or, `Within.RATIO`, the response ratio, with `pool_share(request)` the share of its pool it takes).

    Within one (tier, bid) class tenants take turns by their load: decayed usage plus what they hold now
    (projected over the decay horizon), divided by their weight; each request taken adds to its tenant's
    load, so a cycle's order already follows the weights rather than giving one tenant every free GPU.
    """
    if config.order is Order.FIFO:
        return sorted(queue, key=lambda r: (r.submitted_at_s, r.id))
    if config.within is Within.RATIO:

        def within(r: Request) -> tuple:
            width = width_cost(config, r, pool_share)
            return (-response_ratio(r, now, width, cap_s=config.ratio_cost_cap_s), r.submitted_at_s, r.id)

    else:

        def within(r: Request) -> tuple:
            return (r.submitted_at_s, r.id)

    return fair_merge(queue, config, fair, running, within)


def fair_merge(
    queue: Iterable[Request],
    config: QueueConfig,
    fair: FairShare,
    running: Sequence[Running],
    within: Callable[[Request], tuple],
    by_class: bool = True,
) -> list[Request]:
    """`queue` by (tier, bid) class (`by_class`; else as one class), and within a class tenants taking turns
    by weighted fair share, each tenant's requests in `within` order (`order_requests`' merge; backfill's
    candidates follow it as one class, since spot already yields to a higher tier waiting in its pools)."""
    classes: dict[tuple[int, float], dict[str, list[Request]]] = {}
    for request in queue:
        key = class_key(request) if by_class else (0, 0.0)
        classes.setdefault(key, {}).setdefault(request.tenant, []).append(request)
    horizon = fair.horizon_s
    if all(len(tenants) == 1 for tenants in classes.values()):
        running = ()  # one tenant per class: nobody to take turns with, so what is held does not matter
    held: dict[str, float] = {}
    for r in running:  # what each tenant will hold (the plan counts what a notice frees as free by then)
        held[r.request.tenant] = held.get(r.request.tenant, 0.0) + r.gpus_kept
    load = {t: fair.usage_gpu_s.get(t, 0.0) + g * horizon for t, g in held.items()}
    ordered: list[Request] = []
    for key in sorted(classes):
        tenants = classes[key]
        for requests in tenants.values():
            requests.sort(key=within)
        if len(tenants) == 1:
            ordered.extend(next(iter(tenants.values())))
            continue
        heap = []
        for tenant, requests in tenants.items():
            head = requests[0]
            weighted = load.get(tenant, fair.usage_gpu_s.get(tenant, 0.0)) / _weight(config, tenant)
            heap.append((weighted, head.submitted_at_s, head.id, tenant, 0))
        heapq.heapify(heap)
        while heap:
            weighted, _, _, tenant, index = heapq.heappop(heap)
            request = tenants[tenant][index]
            ordered.append(request)
            weighted += request.gpus_per_node * request.node_count * horizon / _weight(config, tenant)
            if index + 1 < len(tenants[tenant]):
                following = tenants[tenant][index + 1]
                heapq.heappush(heap, (weighted, following.submitted_at_s, following.id, tenant, index + 1))
    return ordered


def keep_head_first(ordered: list[Request], head_id: str) -> list[Request]:
    """`ordered` with the request `head_id` moved before the first request of its (tier, bid) class or lower.

    A blocked head holds a reservation: capacity drains towards its start. If a reordering (response ratio,
    fair share) let another request overtake it each cycle, the drained capacity would go to whoever is head
    next and the big request would starve while GPUs idle. Higher classes still pass it.
    """
    index = next((i for i, r in enumerate(ordered) if r.id == head_id), None)
    if index is None:
        return ordered
    head = ordered[index]
    key = class_key(head)
    target = next(i for i, r in enumerate(ordered) if class_key(r) >= key)
    if target >= index:
        return ordered
    return [*ordered[:target], head, *ordered[target:index], *ordered[index + 1 :]]


def oldest_wide(ordered: Sequence[Request], wide: Callable[[Request], bool]) -> Request | None:
    """The oldest request for which `wide` holds, of the first (tier, bid) class in `ordered` that has one.

    A request that needs whole nodes starts only once they drain. Under the response ratio it becomes the
    head late, when the short narrow requests that could fill its drain have run, so its nodes idle while
    it waits (ITP cluster02: 3.2% of the GPUs idle on drained nodes, against 1.9% under Slurm's FIFO plan).
    Taken in arrival order, each one drains while the narrower requests that came after it are still
    queued to fill the hole. One that takes most of its pool is left to the ratio: draining nearly all of
    it would stall everyone else (`QueueConfig.wide_first_share`).
    """
    best: Request | None = None
    for request in ordered:
        if best is not None and class_key(request) != class_key(best):
            break
        if wide(request) and (best is None or _age(request) < _age(best)):
            best = request
    return best


def _age(request: Request) -> tuple[float, str]:
    return (request.submitted_at_s, request.id)


def class_key(request: Request) -> tuple[int, float]:
    """Tier, then among spot the higher offer first."""
    return (-request.tier, -request.offered_micros_per_hour)


def response_ratio(
    request: Request, now: float, width: float = 0.0, floor_s: float = 0.0, cap_s: float = math.inf
) -> float:
    """(wait + cost) / cost, cost = declared duration (at least `floor_s`) x (1 + `width`): short requests
    first, and every request's ratio grows while it waits, so none starves.

    `width` (`width_cost`) makes a request that takes much of its pool cost more, as in Smith's rule for
    a shared machine: running it holds everyone else back for its whole duration. Without it, a burst of
    short jobs each taking the whole pool outranks one-GPU jobs declared a little longer, which wait
    through the whole burst (ITP cluster01: p95 JCT 75.4 h against 52.5 h under FIFO with EASY backfill;
    with a weight of 3, 43.1 h).
    """
    cost = min(max(request.max_duration_s or UNDECLARED_S, floor_s) * (1.0 + width), cap_s)
    return (max(now - request.submitted_at_s, 0.0) + cost) / cost


def width_cost(config: QueueConfig, request: Request, pool_share: Callable[[Request], float] | None) -> float:
    """The factor `response_ratio` adds to a request's cost: the config's width weight x its pool share."""
    if not config.width_weight or pool_share is None:
        return 0.0
    return config.width_weight * pool_share(request)


def _weight(config: QueueConfig, tenant: str) -> float:
    return max(config.weights.get(tenant, 1.0), 1e-9)


def backfill_key(
    request: Request,
    now: float,
    order: BackfillOrder,
    width: float = 0.0,
    floor_s: float = 0.0,
    cap_s: float = math.inf,
) -> tuple[bool, float]:
    """Smaller first; requests without a duration last (they never backfill). `width`, `floor_s` (the
    least cost RATIO takes) and `cap_s` (the most): as `response_ratio`."""
    declared = request.max_duration_s
    if declared is None:
        return (True, 0.0)
    if order is BackfillOrder.SHORTEST:
        return (False, declared * request.gpus_per_node * request.node_count)
    if order is BackfillOrder.SHORTEST_TIME:
        return (False, declared)
    return (False, -response_ratio(request, now, width, floor_s, cap_s))  # RATIO: highest response ratio
