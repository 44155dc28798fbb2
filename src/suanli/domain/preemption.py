"""Preemption with notice: the cheapest set of strictly lower-tier victims that lets a request fit.

Pure and deterministic. A greedy pass finds a victim set, and a bounded search (`victim_search`: per
node for a one-node request, unions over nodes for a gang) replaces it with a cheaper one when it finds
one. "What if these were gone?" is answered on the snapshot with `release` undo functions, and the
snapshot is left exactly as it was found. Guarantees: only rentals of a strictly lower
tier are victims (so a victim can never preempt its preemptor: no cycles); a gang is released whole or not
at all; a rental already under notice is not chosen again; victims get a deadline of `now + notice_s` for
their tier, and the capacity the preemptor will take is returned with the decision (the promise).

An elastic victim (`Running.least`: it may run on fewer GPUs) may be trimmed instead of evicted: it gives
back, at its deadline, only the part of what it holds above its least size that the promise needs (whole
nodes of a gang, GPUs on a one-node rental's node) and runs on with the rest (`Eviction.keeps`), as
elastic training frameworks shrink a job rather than stop it. A trim loses fewer GPU-seconds than the
eviction of the same rental, so it is tried first; a gang trimmed keeps whole nodes of its shape.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from suanli.domain.errors import RequestError
from suanli.domain.plan import NodeAllocation, Placement
from suanli.domain.policies import Policy
from suanli.domain.request import Request, Tier
from suanli.domain.running import SPOT_FLOOR, Running, eviction_loss_gpu_s, victim_cost
from suanli.domain.scheduler import trial_place
from suanli.domain.snapshot import Snapshot
from suanli.domain.victim_search import cheapest_for_gang, cheapest_on_one_node, fits_without

DEFAULT_NOTICE_S = 30.0
# what a checkpointed job spends again each time it resumes (loading its state, warming up) before it makes
# progress; deep-learning jobs take tens of seconds to minutes (Tiresias, NSDI'19: checkpoint and restore)
RESUME_S = 300.0


@dataclass(frozen=True, slots=True)
class PreemptionConfig:
    """Notice per victim tier (seconds between notice and kill)."""

    notice_s: Mapping[Tier, float] = field(default_factory=dict)
    default_notice_s: float = DEFAULT_NOTICE_S

    def __post_init__(self) -> None:
        for tier, seconds in {**self.notice_s, None: self.default_notice_s}.items():
            if not seconds > 0:  # a deadline at or before the notice kills without one
                name = "default" if tier is None else tier.label
                raise RequestError(
                    f"the {name} notice must be above 0 seconds, not {seconds}", field="notice_s"
                )

    def notice_for(self, tier: Tier) -> float:
        return self.notice_s.get(tier, self.default_notice_s)


@dataclass(frozen=True, slots=True)
class Eviction:
    """One victim: told now, killed at `deadline_s` unless it leaves first."""

    request_id: str
    tier: Tier
    gpus: float
    lost_gpu_s: float
    deadline_s: float
    keeps: Placement | None = None  # a trim: what the victim runs on after its deadline (None: it ends)


@dataclass(frozen=True, slots=True)
class Preemption:
    """Victims for one preemptor and the capacity promised to it once they are gone."""

    preemptor: str
    victims: tuple[Eviction, ...]
    promised: Placement

    @property
    def deadline_s(self) -> float:
        return max(v.deadline_s for v in self.victims)


def choose_victims(
    snapshot: Snapshot,
    request: Request,
    running: Sequence[Running],
    policy: Policy,
    now: float,
    config: PreemptionConfig = PreemptionConfig(),
    reclaim: bool = False,
) -> Preemption | None:
    """The cheapest set of lower-tier victims after which `request` fits, or None; the snapshot is unchanged.

    Phases: (1) candidates: strictly lower tier (with `reclaim`, the same tier or lower: `running` is then
    only the rentals on borrowed GPUs), not already under notice (but for one leaving for the spot floor at
    its deadline, which costs nothing more: its preemptor is promised what it frees then, and no healthy
    rental is evicted beside it), ordered by `victim_cost`; an elastic one
    also as its trim (its part above its least size); (2) grow: release candidates (whole gangs, or trims)
    in that order until the request fits, a rental's eviction replacing its trim; (3) shrink: drop every
    chosen victim, most expensive first, without which it still fits; (3b) search for a cheaper set (the
    greedy pass can pick the cheapest victim on a node where the rest cost more): for a one-node request,
    each node's cheapest sets that free enough there (`cheapest_on_one_node`); for a gang, unions of such
    sets on its likeliest nodes until enough nodes are clear, a gang victim counted once
    (`cheapest_for_gang`); either is kept only if it fits and costs less (`set_cost`); (4) promise the
    placement found, and trim each trimmed victim only by what the promise takes of it.
    """
    eligible = [
        r
        for r in running
        if (r.preempted_by is None or (r.preempted_by == SPOT_FLOOR and not reclaim))
        and (r.request.tier <= request.tier if reclaim else r.request.tier < request.tier)
    ]
    # an elastic rental's trim as a candidate of its own, holding only the part it would give back
    as_trims = [
        (replace(r, placement=part), r)
        for r in eligible
        if r.preempted_by is None and (part := trim_of(r)) is not None
    ]
    trims = {id(trim): whole for trim, whole in as_trims}  # a trim candidate -> the whole rental
    candidates = sorted([*eligible, *(trim for trim, _ in as_trims)], key=lambda r: victim_cost(r, now))
    if not candidates:
        return None
    need = snapshot.least_gpus(request)
    free = snapshot.gpu_count - snapshot.allocated_milli() / 1000
    chosen: list[Running] = []
    gone = _Released(snapshot)  # the chosen, released as they are chosen: each trial adds or takes back one
    try:
        for candidate in candidates:
            if id(candidate) not in trims:  # the whole rental: instead of its trim, if that was chosen
                trimmed = [c for c in chosen if c.request.id == candidate.request.id]
                for trim in trimmed:
                    gone.take_back(trim)
                chosen = [c for c in chosen if c not in trimmed]
                free -= sum(c.gpus for c in trimmed)
            elif any(c.request.id == candidate.request.id for c in chosen):
                continue
            chosen.append(candidate)
            gone.release(candidate)
            free += candidate.gpus
            if free >= need and trial_place(snapshot, request, policy) is not None:
                break
        else:
            return None
        for victim in sorted(chosen, key=lambda r: victim_cost(r, now), reverse=True):
            if len(chosen) == 1:
                break
            gone.take_back(victim)
            if trial_place(snapshot, request, policy) is not None:
                chosen = [r for r in chosen if r is not victim]
            else:
                gone.release(victim)
    finally:
        gone.restore()
    search = cheapest_on_one_node if request.node_count == 1 else cheapest_for_gang
    chosen = search(snapshot, request, candidates, chosen, policy, now)
    promised = fits_without(snapshot, request, chosen, policy)
    assert promised is not None, "the shrunk victim set was checked to fit"
    evictions = (
        _eviction(r, trims.get(id(r)), promised, now, config)
        for r in sorted(chosen, key=lambda r: victim_cost(r, now))
    )
    # a trim the promise took nothing of is no victim; a whole rental is, even one holding no GPU (its CPU
    # or memory may be what the promise needs)
    victims = tuple(e for e in evictions if e.gpus > 0 or e.keeps is None)
    return Preemption(request.id, victims, promised) if victims else None


def trim_of(victim: Running) -> Placement | None:
    """The part of an elastic victim above its least size: its last whole nodes beyond its least count, or
    on its one node the whole GPUs beyond its least; None when it holds no more than that (or is not
    elastic, or runs on borrowed GPUs, which are taken back whole)."""
    if victim.least is None or victim.borrowed:
        return None
    least_nodes, least_gpus = victim.least
    by_node: dict[str, list[NodeAllocation]] = {}
    for allocation in victim.placement.nodes:
        by_node.setdefault(allocation.node, []).append(allocation)
    if len(by_node) > least_nodes:
        surplus = list(by_node)[least_nodes:]
        return Placement(victim.request.id, tuple(a for node in surplus for a in by_node[node]))
    if len(by_node) != 1:
        return None
    ((node, parts),) = by_node.items()
    whole = [s for a in parts for s in a.slices if s.is_whole]
    if len(whole) <= least_gpus:
        return None
    return Placement(victim.request.id, (NodeAllocation(node, 0, 0, tuple(whole[least_gpus:])),))


def kept_through_maintenance(
    allocation: Sequence[NodeAllocation], least: tuple[int, int] | None, going: Collection[str]
) -> tuple[NodeAllocation, ...] | None:
    """What an elastic gang (`least`: its least nodes and GPUs on each, `least_size`) keeps when its nodes in
    `going` go into maintenance: its other nodes, when there are at least its least count of them; None when
    it must end whole (not elastic, one node, or too few left)."""
    if least is None:
        return None
    kept = tuple(a for a in allocation if a.node not in going)
    nodes_kept = len({a.node for a in kept})
    if nodes_kept < max(least[0], 1) or nodes_kept == len({a.node for a in allocation}):
        return None
    return kept


def _eviction(
    chosen: Running, whole: Running | None, promised: Placement, now: float, config: PreemptionConfig
) -> Eviction:
    """`chosen` as an eviction, or (`whole`: the rental `chosen` trims) as a trim by what `promised` takes of
    the part it gives back: a gang's nodes the promise uses, or the GPUs it uses on a one-node rental."""
    deadline = now + config.notice_for(chosen.request.tier)
    if chosen.preempted_by == SPOT_FLOOR and chosen.notice_deadline_s is not None:
        deadline = min(deadline, chosen.notice_deadline_s)  # it leaves then anyway: its notice stands
    if whole is None:
        return Eviction(
            chosen.request.id, chosen.request.tier, chosen.gpus, eviction_loss_gpu_s(chosen, now), deadline
        )
    taken = {(a.node, s.gpu_index) for a in promised.nodes for s in a.slices}
    gang = len({a.node for a in whole.placement.nodes}) > 1
    given: list[NodeAllocation] = []
    for part in chosen.placement.nodes:
        used = [s for s in part.slices if (part.node, s.gpu_index) in taken]
        if gang and used:
            given.append(part)
        elif used:
            given.append(NodeAllocation(part.node, 0, 0, tuple(used)))
    keeps = _without(whole.placement, given, gang)
    gpus = whole.gpus - keeps.gpus
    lost = whole.lost_gpu_s(now) * gpus / whole.gpus
    return Eviction(chosen.request.id, chosen.request.tier, gpus, lost, deadline, keeps)


def _without(placement: Placement, given: Sequence[NodeAllocation], gang: bool) -> Placement:
    """`placement` less `given`: a gang's whole nodes, or GPUs on the one node."""
    if gang:
        gone = {a.node for a in given}
        kept = tuple(a for a in placement.nodes if a.node not in gone)
    else:
        gone_slices = {s for a in given for s in a.slices}
        kept = tuple(
            replace(a, slices=rest)
            for a in placement.nodes
            if (rest := tuple(s for s in a.slices if s not in gone_slices)) or a.cpu_milli or a.memory_mib
        )
    return replace(placement, nodes=kept, repartitions=())


class _Released:
    """Rentals released from a snapshot for a trial and taken back one at a time, in any order (`occupy`
    puts each back at its own GPU indices), so a victim set grows and shrinks by one without releasing the
    rest again: O(victims) work where releasing every trial's set was O(victims^2) on a large fleet."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.out: dict[int, Running] = {}

    def release(self, rental: Running) -> None:
        for allocation in rental.placement.nodes:
            self.snapshot.release(allocation)
        self.out[id(rental)] = rental

    def take_back(self, rental: Running) -> None:
        for allocation in rental.placement.nodes:
            self.snapshot.occupy(allocation)
        del self.out[id(rental)]

    def restore(self) -> None:
        """Take back every rental still released: the snapshot is as it was."""
        for rental in list(self.out.values()):
            self.take_back(rental)


def running_floor(
    snapshot: Snapshot, floor_of: Callable[[str, str], int | None], rental: Running
) -> int | None:
    """The highest spot floor of the pools (model, region) `rental` runs in (None: none has one)."""
    floors = []
    for allocation in rental.placement.nodes:
        node = snapshot.by_name.get(allocation.node)
        if node is not None:
            gpu_class = snapshot.classes[node.class_id]
            if (floor := floor_of(gpu_class.model.name, gpu_class.region)) is not None:
                floors.append(floor)
    return max(floors, default=None)


def below_floor(
    running: Sequence[Running],
    floor_of: Callable[[Running], int | None],
    now: float,
    config: PreemptionConfig = PreemptionConfig(),
) -> tuple[Eviction, ...]:
    """Spot rentals whose bid is below their pool's floor (`floor_of`), each with its notice deadline.

    A rental that bids nothing pays the pool's spot price, never below the floor, so it is never one.
    Rentals already under notice are left alone; the caller marks the rest `preempted_by=SPOT_FLOOR`.
    """
    evictions = []
    for r in running:
        if r.request.tier is not Tier.SPOT or r.preempted_by is not None:
            continue
        bid = r.request.bid_micros_per_hour
        floor = floor_of(r) if bid is not None else None  # no bid: it pays the spot price
        if floor is not None and bid < floor:
            evictions.append(
                Eviction(
                    r.request.id,
                    r.request.tier,
                    r.gpus,
                    eviction_loss_gpu_s(r, now),
                    now + config.notice_for(r.request.tier),
                )
            )
    return tuple(evictions)
