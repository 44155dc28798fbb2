"""The queueing simulator: replay a job trace with arrivals and departures in virtual time through `admit`.

Discrete events on a heap (departures and preemption deadlines before arrivals at the same instant); after
each instant's events, one scheduling cycle with the same domain code the server runs. Jobs run for their
true duration; the scheduler only sees the declared one (see `DurationEstimate`). A preempted job is killed
at its notice deadline and queued again, keeping its submission time: from scratch (its work is lost), or
with what is left when jobs checkpoint (then each resumption costs `RESTART_S` of wasted GPU-time, and the
queue may lend them idle GPUs: `QueueConfig.borrow_idle`). `sim/queue_report.py` loads workloads and
prints, writes and plots.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from suanli.domain.catalog_data import CATALOG
from suanli.domain.contracts import Contract, growth_breach
from suanli.domain.elastic_start import Drain, full_gpus, grow_toward_size
from suanli.domain.errors import RequestError
from suanli.domain.fair_share import FairShare
from suanli.domain.inventory import Fleet
from suanli.domain.plan import Placement
from suanli.domain.policies import BestFitPolicy, Policy
from suanli.domain.preemption import RESUME_S
from suanli.domain.promise_holds import hold_promise
from suanli.domain.queue_order import (
    BOOKED_QUEUE,
    GREEDY_QUEUE,
    PLATFORM_QUEUE,
    WIDE_FIRST_QUEUE,
    BackfillOrder,
    Mode,
    Order,
    QueueConfig,
)
from suanli.domain.queueing import NEVER_FITS, CycleDecision, Gates, admit
from suanli.domain.request import Request, Tier, WholeGpus
from suanli.domain.reservation import reserve
from suanli.domain.running import Running
from suanli.domain.scattered import scattered_gpus
from suanli.domain.snapshot import Snapshot
from suanli.sim.contract_sale import tier_label
from suanli.sim.elastic_jobs import ElasticJobs, as_elastic
from suanli.sim.itp import (
    DurationEstimate,
    TraceJob,
    gang_shape,
)
from suanli.sim.queue_result import QueueResult
from suanli.sim.traces import TracePod

# fifo: strict arrival order, nothing passes a blocked head. fifo-backfill: Slurm's default behaviour, its
# backfill plugin with its defaults: arrival order, every job booked at its earliest slot (whole nodes), none
# delayed by a later one, bookings up to a day ahead (bf_window) for up to 500 jobs (bf_max_job_test).
# fifo-easy: EASY backfill (only the head is protected), candidates in arrival order. suanli: tier / spot
# bid / weighted fair share, then within a tenant's class the highest response ratio (wait + declared) /
# declared first (HRRN: short jobs first, but every job's ratio grows while it waits, so none starves), EASY
# backfill with candidates by the same ratio, and preemption (the server's `SUANLI_QUEUE=backfill`). The
# server's two other queues: greedy (its default: whatever fits starts, in tier, bid, fair share and age
# order) and conservative (Slurm's plan in that order, with preemption). suanli-wide-first: suanli with
# whole-node requests in arrival order (`WIDE_FIRST_QUEUE`): an allocation-first experiment, not a
# server queue.
POLICIES: dict[str, QueueConfig] = {
    "fifo": QueueConfig(mode=Mode.STRICT, order=Order.FIFO),
    "fifo-easy": QueueConfig(mode=Mode.BACKFILL, order=Order.FIFO, backfill_order=BackfillOrder.QUEUE),
    "fifo-backfill": QueueConfig(mode=Mode.CONSERVATIVE, order=Order.FIFO),
    "suanli": PLATFORM_QUEUE,
    "greedy": GREEDY_QUEUE,
    "conservative": BOOKED_QUEUE,
    "suanli-wide-first": WIDE_FIRST_QUEUE,
}
BASELINES = ("fifo", "fifo-easy", "fifo-backfill")  # the published policies `suanli` is measured against
SPOT_BID_MICROS = (500_000, 3_000_000)  # spot bids drawn uniformly in this range (micros per GPU-hour)
DEFAULT_ESTIMATE = DurationEstimate()
END, KILL, ARRIVE = 0, 1, 2  # event kinds, in the order they are handled at one instant
RESTART_S = RESUME_S  # what a checkpointed job spends again each time it resumes, before it makes progress


MAX_MIX_WEIGHT = 1e6  # a share is a weight; past this their sum may overflow to infinity


def parse_mix(text: str | None) -> dict[Tier, float]:
    """`on_demand=0.6,spot=0.3,reserved=0.1` as tier -> probability (normalised); empty: all on-demand."""
    if not text:
        return {Tier.ON_DEMAND: 1.0}
    mix: dict[Tier, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        try:
            tier, share = Tier.parse(name), float(value)
        except (ValueError, RequestError) as error:
            raise ValueError(f"--mix {text!r}: {part!r} is not TIER=SHARE ({error})") from None
        if tier in mix:
            raise ValueError(f"--mix {text!r}: {tier.name.lower()} is named twice")
        mix[tier] = share
    if not all(0 <= v <= MAX_MIX_WEIGHT for v in mix.values()) or sum(mix.values()) <= 0:  # NaN too
        raise ValueError(f"--mix {text!r}: shares must be from 0 to {MAX_MIX_WEIGHT:g} and not all 0")
    total = sum(mix.values())
    return {tier: v / total for tier, v in mix.items()}


def build_requests(
    jobs: Sequence[TraceJob],
    gpus_per_node: int,
    estimate: DurationEstimate,
    mix: dict[Tier, float] | None = None,
    seed: int = 0,
) -> list[Request]:
    """One request per job (shaped by `gang_shape`), its declared duration, and a seeded tier and bid."""
    rng = random.Random(seed)
    tiers, weights = zip(*sorted((mix or {Tier.ON_DEMAND: 1.0}).items()), strict=True)
    requests = []
    for number, job in enumerate(jobs):
        per_node, nodes = gang_shape(job.gpus, gpus_per_node)
        tier = rng.choices(tiers, weights)[0] if len(tiers) > 1 else tiers[0]
        bid = rng.randint(*SPOT_BID_MICROS) if tier is Tier.SPOT else None
        requests.append(
            Request(
                id=f"{number}:{job.job_id}",
                shape=WholeGpus(per_node),
                node_count=nodes,
                tier=tier,
                bid_micros_per_hour=bid,
                submitted_at_s=job.submitted_s,
                max_duration_s=estimate.declared(job),
            )
        )
    return requests


def run_queue(
    fleet: Fleet,
    jobs: Sequence[TraceJob],
    policy_name: str,
    *,
    estimate: DurationEstimate = DEFAULT_ESTIMATE,
    mix: dict[Tier, float] | None = None,
    seed: int = 0,
    placement: Policy | None = None,
    on_progress: Callable[[float], None] | None = None,
    sample_every_s: float = 600.0,
    checkpoint: bool = False,
    restart_s: float = RESTART_S,
    elastic: float | None = None,
    resize_restart_s: float = 0.0,
) -> QueueResult:
    """Replay `jobs` on `fleet` under the named policy (`POLICIES`); deterministic for the same inputs."""
    started = time.perf_counter()
    gpus_per_node = max(node.gpu_count for node in fleet.nodes)
    requests = build_requests(jobs, gpus_per_node, estimate, mix, seed)
    true_s = [max(j.duration_s, 1.0) for j in jobs]
    return run_requests(
        fleet,
        requests,
        true_s,
        policy_name,
        estimate=estimate,
        placement=placement,
        on_progress=on_progress,
        sample_every_s=sample_every_s,
        started=started,
        checkpoint=checkpoint,
        restart_s=restart_s,
        elastic=elastic,
        resize_restart_s=resize_restart_s,
    )


def pod_requests(
    pods: Sequence[TracePod],
    estimate: DurationEstimate = DEFAULT_ESTIMATE,
    mix: dict[Tier, float] | None = None,
    seed: int = 0,
) -> tuple[list[Request], list[float]]:
    """openb pods as timed requests: arrival = creation, true duration = deletion - scheduling (at least 1 s).

    The time from creation to scheduling is the traced cluster's queueing, not run time. Every pod that ran
    is replayed whatever its final phase (the trace deletes Failed ones too, and they held their GPUs until
    then); a pod never scheduled (Pending, no `scheduled_time`) held nothing and is left out. The declared
    duration follows `estimate` like ITP jobs; tier and bid as `build_requests`.
    """
    rng = random.Random(seed)
    tiers, weights = zip(*sorted((mix or {Tier.ON_DEMAND: 1.0}).items()), strict=True)
    requests, true_s = [], []
    for pod in pods:
        if pod.scheduled_s is None:
            continue
        end_s = pod.deletion_s if pod.deletion_s is not None else pod.scheduled_s
        duration = max(end_s - pod.scheduled_s, 1.0)
        gpus = max(1, round(pod.request.gpus_per_node))
        declared = estimate.declared(TraceJob(pod.request.id, pod.creation_s, duration, gpus))
        tier = rng.choices(tiers, weights)[0] if len(tiers) > 1 else tiers[0]
        bid = rng.randint(*SPOT_BID_MICROS) if tier is Tier.SPOT else None
        requests.append(
            replace(
                pod.request,
                submitted_at_s=pod.creation_s,
                max_duration_s=declared,
                tier=tier,
                bid_micros_per_hour=bid,
            )
        )
        true_s.append(duration)
    return requests, true_s


def run_requests(
    fleet: Fleet,
    requests: Sequence[Request],
    true_durations_s: Sequence[float],
    policy_name: str,
    *,
    estimate: DurationEstimate = DEFAULT_ESTIMATE,
    placement: Policy | None = None,
    on_progress: Callable[[float], None] | None = None,
    sample_every_s: float = 600.0,
    started: float | None = None,
    checkpoint: bool = False,
    restart_s: float = RESTART_S,
    elastic: float | None = None,
    resize_restart_s: float = 0.0,
    contracts: Sequence[Contract] = (),
    weights: Mapping[str, float] | None = None,
) -> QueueResult:
    """Replay timed `requests` (each runs its true duration once started) under the named policy.

    A preempted job runs again in full, unless `checkpoint`: then every request checkpoints (so the queue
    may lend it idle GPUs), a preempted one saves at its notice deadline, and it runs what is left plus
    `restart_s` when it starts again (its declared duration too). With `elastic`, every request of more than
    one whole GPU may start on that share of its GPUs (`Request.min_gpus`; a policy with
    `QueueConfig.elastic_start` uses it) and is grown toward its size after each cycle's admission (as the
    server's leader grows rentals), off a rigid blocked head's drain; it runs at the share of its GPUs it
    holds of its full speed (linear scaling), and each resize costs it `resize_restart_s` on its new GPUs
    (counted as lost work; none by default: the model's resizes are free). `contracts` hold capacity for
    their holders (tenants of `requests`) in their windows, as on the server: the holder's requests up to
    the contracted count are promoted to reserved, on-demand keeps off the held capacity, and spot that
    borrowed it is preempted with notice when the holder claims it; the holders' jobs are the per-tier
    figures' `contract` row. `weights`: the tenants' fair-share weights (those a policy that orders by fair
    share uses), with each tenant's share of the allocated GPU-time in the figures (`per_tenant`)."""
    config = POLICIES[policy_name]
    if weights:
        config = replace(config, weights=MappingProxyType(dict(weights)))
    gates = Gates(contracts=tuple(contracts), evict_below_floor=False) if contracts else None
    holders = frozenset(c.tenant for c in contracts)  # their jobs' figures: the `contract` row
    if elastic is not None:
        if not 0 < elastic <= 1:
            raise RequestError("the share an elastic job may start on is in (0, 1]", field="elastic")
        requests = [as_elastic(r, elastic) for r in requests]
    if resize_restart_s < 0 or (resize_restart_s > 0 and elastic is None):
        raise RequestError(
            "a resize's restart is >= 0 s, and only elastic jobs (--elastic) are resized",
            field="resize_restart_s",
        )
    started = time.perf_counter() if started is None else started
    snapshot = Snapshot(fleet, CATALOG)
    true_s = {r.id: max(d, 1.0) for r, d in zip(requests, true_durations_s, strict=True)}
    if checkpoint:
        requests = [replace(r, checkpoints=True) for r in requests]
    by_id = {r.id: r for r in requests}
    result = QueueResult(policy_name, fleet.gpu_count, len(requests), estimate.describe())
    result.weights = dict(weights or {})
    if not requests:
        return result
    policy = placement or BestFitPolicy()
    first_arrival = min(r.submitted_at_s for r in requests)
    last_arrival = max(r.submitted_at_s for r in requests)
    events: list[tuple[float, int, int, str, float]] = [
        (r.submitted_at_s, ARRIVE, n, r.id, 0.0) for n, r in enumerate(requests)
    ]
    heapq.heapify(events)
    sequence = len(events)
    queue: dict[str, Request] = {}
    running: dict[str, Running] = {}
    promised: dict[str, Placement] = {}  # preemptor -> where it was promised capacity
    held: dict[str, float] = {}
    done_s: dict[str, float] = {}  # with `checkpoint`: seconds of its run a preempted job has saved
    lost_s: dict[str, float] = {}  # without: seconds a preempted job ran for nothing (not time in the queue)
    jobs = ElasticJobs(resize_restart_s)  # with `elastic`: the running jobs' work left and resizes
    trimmed_to: dict[str, Placement] = {}  # an elastic victim under notice -> what it keeps at its deadline
    fair = FairShare(at_s=first_arrival)
    head: str | None = None
    reserved: tuple[str, ...] = ()
    allocated = 0.0
    # free GPUs while requests wait (as of the last instant); of them, on the head's reserved nodes, and
    # scattered elsewhere
    idle_waiting = idle_held = idle_scattered = 0.0
    previous = first_arrival
    last_end = first_arrival  # the last completion (a stale event after it does not extend the makespan)
    next_sample = first_arrival
    while events:
        now = events[0][0]
        span = now - previous
        result.alloc_gpu_s_total += allocated * span
        overlap = max(0.0, min(now, last_arrival) - max(previous, first_arrival))
        result.alloc_gpu_s_arrivals += allocated * overlap
        result.idle_waiting_gpu_s += idle_waiting * overlap
        result.idle_held_gpu_s += idle_held * overlap
        result.idle_scattered_gpu_s += idle_scattered * overlap
        if result.weights and overlap:
            for tenant, gpus in held.items():
                result.tenant_gpu_s[tenant] = result.tenant_gpu_s.get(tenant, 0.0) + gpus * overlap
        if config.order is Order.PRIORITY:
            fair = fair.advance(now, held)
        previous = now
        while events and events[0][0] == now:
            _, kind, _, request_id, stamp = heapq.heappop(events)
            if kind == ARRIVE:
                queue[request_id] = by_id[request_id]
                continue
            job = running.get(request_id)
            if job is None or job.started_at_s != stamp:
                continue  # a stale event: the run it belonged to already ended
            if kind == KILL and request_id in trimmed_to:  # an elastic victim gives back part, runs on
                keeps = trimmed_to.pop(request_id)
                for allocation in job.placement.nodes:
                    snapshot.release(allocation)
                for allocation in keeps.nodes:
                    snapshot.occupy(allocation)
                running[request_id], end_s, wasted = jobs.resize(
                    job, keeps, by_id[request_id], now, true_s[request_id]
                )
                result.lost_gpu_s += wasted
                if now <= last_arrival:
                    result.lost_gpu_s_arrivals += wasted
                allocated -= job.gpus - keeps.gpus
                held[job.request.tenant] -= job.gpus - keeps.gpus
                result.trims += 1
                sequence += 1
                heapq.heappush(events, (end_s, END, sequence, request_id, now))
                continue
            del running[request_id]
            for allocation in job.placement.nodes:
                snapshot.release(allocation)
            allocated -= job.gpus
            held[job.request.tenant] -= job.gpus
            overhead_s = restart_s if request_id in done_s else 0.0  # this run's restart from a checkpoint
            wasted_before = result.lost_gpu_s
            if kind == END:
                full_gpu_count = full_gpus(by_id[request_id]) if elastic is not None else job.gpus
                result.lost_gpu_s += full_gpu_count * overhead_s  # its restart's work, at its full size
                last_end = now
                result.jct_s.append(now - job.request.submitted_at_s)
                if elastic is not None:  # it ran slower while it held less than its size
                    wasted, ran_s = jobs.end(job, now)  # (its last resize's restart)
                    result.lost_gpu_s += wasted
                    ran_s += lost_s.pop(request_id, 0.0)
                else:
                    ran_s = true_s[request_id] + lost_s.pop(request_id, 0.0) + overhead_s
                result.wait_s.append(now - job.request.submitted_at_s - ran_s)
                result.tier_of.append(tier_label(job.request, holders))
                result.tenant_of.append(job.request.tenant)
            else:
                result.preemptions += 1
                tier = tier_label(job.request, holders)
                result.preempted_by_tier[tier] = result.preempted_by_tier.get(tier, 0) + 1
                ran = now - job.started_at_s
                if checkpoint and elastic is not None:  # saves the work it did, in full-speed seconds
                    full = by_id[request_id]
                    saved, lost_gpu_s, ran_s = jobs.saved(job, full, now, overhead_s)
                    result.lost_gpu_s += lost_gpu_s
                    lost_s[request_id] = lost_s.get(request_id, 0.0) + ran_s
                    done_s[request_id] = done_s.get(request_id, 0.0) + saved
                    declared = full.max_duration_s
                    left = None if declared is None else max(declared - done_s[request_id], 1.0) + restart_s
                    queue[request_id] = replace(full, max_duration_s=left)
                elif checkpoint:
                    saved = max(ran - overhead_s, 0.0)
                    result.lost_gpu_s += job.gpus * (ran - saved)
                    lost_s[request_id] = lost_s.get(request_id, 0.0) + ran - saved
                    done_s[request_id] = done_s.get(request_id, 0.0) + saved
                    declared = by_id[request_id].max_duration_s
                    left = None if declared is None else max(declared - done_s[request_id], 1.0) + restart_s
                    queue[request_id] = replace(job.request, max_duration_s=left)
                elif elastic is not None:
                    lost_gpu_s, ran_s = jobs.preempted(job, now)
                    result.lost_gpu_s += lost_gpu_s
                    lost_s[request_id] = lost_s.get(request_id, 0.0) + ran_s
                    queue[request_id] = by_id[request_id]
                else:
                    result.lost_gpu_s += job.gpus * ran
                    lost_s[request_id] = lost_s.get(request_id, 0.0) + ran
                    queue[request_id] = job.request
            if now <= last_arrival:
                result.lost_gpu_s_arrivals += result.lost_gpu_s - wasted_before
        idle_waiting = idle_held = idle_scattered = 0.0
        drain = None  # what waiting requests were promised, made again below for this cycle's growth
        spot_yields: frozenset[tuple[str, str]] = frozenset()
        waiting: list[Request] = []
        if queue:
            result.cycles += 1
            decision = admit(
                snapshot,
                list(queue.values()),
                list(running.values()),
                policy,
                now,
                config,
                fair,
                promised,
                gates,
                last_head=head,
                last_reserved=reserved,
            )
            head, reserved = decision.head, decision.reserved_nodes
            spot_yields = decision.spot_yields
            borrowed = set(decision.borrowed)
            for placement_ in decision.placements:
                request = queue.pop(placement_.request_id)
                promised.pop(request.id, None)
                running[request.id] = Running(request, placement_, now, borrowed=request.id in borrowed)
                result.started_at_s[request.id] = now
                allocated += placement_.gpus
                held[request.tenant] = held.get(request.tenant, 0.0) + placement_.gpus
                sequence += 1
                left_s = true_s[request.id] - done_s.get(request.id, 0.0)
                if request.id in done_s:
                    left_s += restart_s
                end_s = now + left_s
                if elastic is not None:
                    running[request.id], end_s = jobs.start(
                        request, placement_, now, left_s, borrowed=request.id in borrowed
                    )
                heapq.heappush(events, (end_s, END, sequence, request.id, now))
            if elastic is not None and decision.bookings:
                drain = Drain.for_bookings(decision.bookings)
            elif elastic is not None and head is not None and queue[head].min_gpus is None:
                drain = _drain(snapshot, queue[head], decision, list(running.values()), policy, now, config)
            for preemption in decision.preemptions:
                promised[preemption.preemptor] = preemption.promised
                for victim in preemption.victims:
                    if victim.keeps is not None:
                        trimmed_to[victim.request_id] = victim.keeps
                    job = running[victim.request_id]
                    running[victim.request_id] = replace(
                        job,
                        preempted_by=preemption.preemptor,
                        notice_deadline_s=victim.deadline_s,
                        keeps=victim.keeps,
                    )
                    sequence += 1
                    heapq.heappush(
                        events, (victim.deadline_s, KILL, sequence, victim.request_id, job.started_at_s)
                    )
            waiting = [by_id[p.request_id] for p in decision.pending if p.reason not in NEVER_FITS]
        if elastic is not None and config.elastic_start and running:
            # after admission, as the server's leader resizes (a running job does not jump ahead of what
            # waits), off a rigid blocked head's drain, and not onto GPUs promised to a preemptor
            holds = [part for promise in promised.values() for part in hold_promise(snapshot, promise)]
            grown = grow_toward_size(
                snapshot,
                list(running.values()),
                policy,
                drain,
                spot_yields,
                jobs.run_began_s,
                _off_holds(snapshot, running.values(), contracts, now) if contracts else None,
            )
            for give_back, _ in reversed(holds):
                give_back()
            for part in grown:
                job = running[part.request_id]
                full = by_id[part.request_id]
                merged = replace(job.placement, nodes=job.placement.nodes + part.nodes)
                running[full.id], end_s, wasted = jobs.resize(job, merged, full, now, true_s[full.id])
                result.lost_gpu_s += wasted
                if now <= last_arrival:
                    result.lost_gpu_s_arrivals += wasted
                allocated += part.gpus
                held[full.tenant] += part.gpus
                sequence += 1
                heapq.heappush(events, (end_s, END, sequence, full.id, now))
        if waiting:  # (a request that never fits the fleet does not count as waiting)
            idle_waiting = fleet.gpu_count - allocated
            drained = _drained_for(
                snapshot, queue.get(head) if head else None, reserved, running, policy, now, config
            )
            idle_held = sum(snapshot.by_name[n].free_milli for n in drained) / 1000
            if idle_waiting - idle_held > 1e-9:
                idle_scattered = scattered_gpus(snapshot, waiting, drained)
        if now >= next_sample or not events:
            result.samples.append((now, allocated, len(queue)))
            next_sample = now + sample_every_s
        if on_progress is not None:
            on_progress(now)
    result.arrival_span_s = last_arrival - first_arrival
    result.makespan_s = last_end - first_arrival
    result.wall_s = time.perf_counter() - started
    return result


def _off_holds(
    snapshot: Snapshot, running: Iterable[Running], contracts: Sequence[Contract], now: float
) -> Callable[[Running, Placement], bool]:
    """Whether a growth keeps off capacity open contracts hold for other tenants, counting the growths
    allowed before it in this cycle, as the server's leader judges a resize (`growth_breach`)."""
    holding = [(r.request, r.placement, r.preempted_by is not None) for r in running]

    def allows(job: Running, part: Placement) -> bool:
        gpus_per_node = round(part.gpus / len(part.nodes))
        more = replace(
            job.request,
            id=f"{job.request.id}+grown",
            shape=WholeGpus(gpus_per_node),
            node_count=len(part.nodes),
            min_gpus=None,
        )
        if growth_breach(snapshot, holding, contracts, part, more, now) is not None:
            return False
        holding.append((more, part, False))
        return True

    return allows


def _drained_for(
    snapshot: Snapshot,
    head: Request | None,
    reserved: frozenset[str] | Sequence[str],
    running: Mapping[str, Running],
    policy: Policy,
    now: float,
    config: QueueConfig,
) -> Collection[str]:
    """The nodes drained for the blocked `head`: the decision's reservation, or, when EASY backfill skipped
    it (nothing could pass the head), the one it would have made, as the server's leader works it out for
    its gauges; so GPUs idle there count as held for the head whichever way the cycle went."""
    if reserved or head is None or config.mode is not Mode.BACKFILL:
        return reserved
    found = reserve(snapshot, head, list(running.values()), policy, now, spare_free=config.spare_free)
    return () if found is None else {a.node for a in found[1].nodes}


def _drain(
    snapshot: Snapshot,
    head: Request,
    decision: CycleDecision,
    running: Sequence[Running],
    policy: Policy,
    now: float,
    config: QueueConfig,
) -> Drain | None:
    """Where the rigid blocked `head` is reserved and from when, as the server's leader works it out for
    growth to keep off: the decision's reservation, or one made now when `admit` did not need it."""
    if decision.reserved_nodes:
        return Drain.for_head(decision.reserved_nodes, decision.head_start_s)
    found = reserve(snapshot, head, running, policy, now, spare_free=config.spare_free)
    return None if found is None else Drain.for_head((a.node for a in found[1].nodes), found[0])
