"""Bounded searches for the cheapest victim set (`set_cost`) that lets a request fit, run by
`choose_victims` after its greedy pass, whose set they replace only with a cheaper one that fits. Both
look only at the candidates that alone cost no more than that set (`_cheaper_than`).

One node (`cheapest_on_one_node`): on every node, every set of its cheapest rentals that frees enough
there; exact within SEARCH_RENTALS_PER_NODE and SEARCH_FIT_TRIALS. A gang (`cheapest_for_gang`): per
pool (GPU model and region: a gang's nodes share both), the nodes likeliest to clear cheaply each offer
their cheapest minimal sets that free one gang node's need, and a beam search unites them until
`node_count` nodes are clear, a victim shared by several nodes (a gang, evicted whole) counted once.
Bounded on any fleet: it searches `node_count` + SEARCH_GANG_SPARE_NODES nodes per pool. Exact on a small
fleet of whole GPUs, where it searches every node, no node has more minimal sets per tier than
SEARCH_GANG_CLEARANCES and no step makes more partial unions than SEARCH_GANG_BEAM (the cheapest union is
made of minimal sets, one per node it clears).

Pure and deterministic; the snapshot is left as it was found (`fits_without` releases and undoes).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from suanli.domain.plan import Placement
from suanli.domain.policies import Policy
from suanli.domain.request import Request
from suanli.domain.running import Running, set_cost, victim_cost
from suanli.domain.scheduler import best_option, nominate, trial_place
from suanli.domain.snapshot import NodeState, Snapshot

SEARCH_RENTALS_PER_NODE = 10  # the cheapest rentals on a node that a search combines
SEARCH_FIT_TRIALS = 64  # trial placements a search may make: it is bounded however crowded the fleet
SEARCH_GANG_SPARE_NODES = 8  # per region, the nodes beyond a gang's count whose clearances it combines
SEARCH_GANG_CLEARANCES = 3  # per node and tier, the cheapest sets freeing a gang node's need that it combines
SEARCH_GANG_BEAM = 16  # the cheapest partial combinations of node clearances it keeps at each step
NEAR_TIE_S = 1.0  # gang victim sets whose GPU-seconds lost differ by under this per GPU: topology decides


def cheapest_on_one_node(
    snapshot: Snapshot,
    request: Request,
    candidates: Sequence[Running],
    chosen: list[Running],
    policy: Policy,
    now: float,
) -> list[Running]:
    """The cheapest victim set (`set_cost`) after which the one-node `request` fits: on each node, every
    set of its cheapest rentals (each evicted, trimmed, or left) that frees enough GPUs there and costs
    less than `chosen` is a candidate, and the cheapest that fits wins; `chosen` when none does.
    `candidates` come in `victim_cost` order."""
    best = set_cost(chosen, now)
    need_milli = snapshot.least_gpus(request) * 1000 - 1e-6
    found: list[tuple[tuple, list[Running]]] = []
    for node, by_rental in _victims_by_node(_cheaper_than(candidates, best, now)).items():
        state = snapshot.by_name[node]
        if not state.schedulable:
            continue
        local = _NodeRentals.of(node, by_rental, state.free_milli)
        found.extend(
            _sets_freeing(local.rentals, local.freed, local.reach, state.free_milli, need_milli, best, now)
        )
    found.sort(key=lambda f: f[0])
    for _, victims in found[:SEARCH_FIT_TRIALS]:
        if fits_without(snapshot, request, victims, policy) is not None:
            return victims
    return chosen


def cheapest_for_gang(
    snapshot: Snapshot,
    request: Request,
    candidates: Sequence[Running],
    chosen: list[Running],
    policy: Policy,
    now: float,
) -> list[Running]:
    """The cheapest victim set (`set_cost`) found after which the gang `request` fits: in each pool (GPU
    model and region), the nodes likeliest to clear cheaply (`_gang_nodes`) each offer their cheapest sets
    that free one gang node's need there (`_clearances`), a beam search unites them until `node_count`
    nodes are clear, counting a victim they share (a gang) once (`_combinations`), and the cheapest union
    that fits and costs less than `chosen` wins; `chosen` when none does. Sets as cheap but for up to
    `NEAR_TIE_S` lost per GPU (victims that started a moment apart) are near ties, and the one whose gang
    would land in the smallest network subtree wins among them: a gang in one leaf runs faster for as long
    as it runs."""
    greedy = set_cost(chosen, now)
    # the search's bound: as cheap as the greedy set, or dearer only by a near tie's margin
    best = (greedy[0], greedy[1] + NEAR_TIE_S * max(greedy[3], 1), *greedy[2:])
    need_milli = snapshot.least_gpus(request) / request.node_count * 1000 - 1e-6
    found: list[tuple[tuple, list[Running]]] = [(greedy, chosen)]
    for region in _gang_nodes(snapshot, request, candidates, need_milli, best, policy, now):
        nodes = [replace(node, clearances=_clearances(node, need_milli, best, now)) for node in region]
        found.extend(_combinations(nodes, request.node_count, need_milli, best, now))
    found.sort(key=lambda f: f[0])
    tried: set[frozenset[int]] = set()
    cheapest: tuple | None = None  # the cost of the cheapest set that fits
    fitting: tuple[list[Running], int] | None = None  # the near tie chosen, and its gang's subtree depth
    for cost, victims in found:
        if len(tried) == SEARCH_FIT_TRIALS:
            break
        if cheapest is not None:
            if cost[0] != cheapest[0] or cost[1] > cheapest[1] + NEAR_TIE_S * max(cheapest[3], 1):
                break  # sorted: no later set is as cheap
            if cost[2] > cheapest[2]:
                continue  # a higher bid lost
        if (key := frozenset(map(id, victims))) not in tried:
            tried.add(key)
            placement = fits_without(snapshot, request, victims, policy)
            if placement is None:
                continue
            depth = len(placement.subtree.split("/")) if placement.subtree else 0
            cheapest = cheapest or cost
            if fitting is None or depth > fitting[1]:
                fitting = (victims, depth)
    return chosen if fitting is None else fitting[0]  # (the trials may run out before the greedy set)


def _cheaper_than(candidates: Sequence[Running], best: tuple, now: float) -> Sequence[Running]:
    """The first of `candidates` (in `victim_cost` order), up to the first that alone costs more than
    `best`: no set holding it or a later one could cost less."""
    return candidates[: bisect_right(candidates, best[:4], key=lambda r: victim_cost(r, now)[:4])]


def _victims_by_node(candidates: Sequence[Running]) -> dict[str, dict[str, list[Running]]]:
    """Node -> rental id -> its options on that node (its eviction, its trim), in `candidates`' order."""
    on_node: dict[str, dict[str, list[Running]]] = {}
    for candidate in candidates:
        for node in {a.node for a in candidate.placement.nodes}:
            on_node.setdefault(node, {}).setdefault(candidate.request.id, []).append(candidate)
    return on_node


@dataclass(frozen=True, slots=True)
class _NodeRentals:
    """A node's cheapest rentals (`victim_cost`, at most SEARCH_RENTALS_PER_NODE) with what each option of
    each frees there (`freed`, by `id`) and what the rentals from each on could free at most (`reach`)."""

    name: str
    rentals: list[list[Running]]
    freed: dict[int, float]
    reach: list[float]
    free_milli: float
    clear_now: bool = False  # it takes one of a gang's nodes as it is
    clearances: list[list[Running]] = field(default_factory=list)  # a gang search's cheapest sets for it

    @staticmethod
    def of(node: str, by_rental: Mapping[str, list[Running]], free_milli: float) -> _NodeRentals:
        """`node`'s rentals from `by_rental` (rental id -> its options there, in `victim_cost` order)."""
        rentals = list(by_rental.values())[:SEARCH_RENTALS_PER_NODE]
        freed = {
            id(o): sum(s.milli for a in o.placement.nodes if a.node == node for s in a.slices)
            for options in rentals
            for o in options
        }
        reach = [0.0] * (len(rentals) + 1)
        for j in range(len(rentals) - 1, -1, -1):
            reach[j] = reach[j + 1] + max(freed[id(o)] for o in rentals[j])
        return _NodeRentals(node, rentals, freed, reach, free_milli)


def _sets_freeing(
    rentals: Sequence[list[Running]],
    freed: Mapping[int, float],
    reach: Sequence[float],
    milli: float,
    need_milli: float,
    best: tuple,
    now: float,
    picked: tuple[Running, ...] = (),
    supersets: bool = True,
) -> Iterator[tuple[tuple, list[Running]]]:
    """(cost, set) for every set of one option per chosen rental that brings `milli` (free on the node, plus
    what each option frees there: `freed`) to `need_milli` and costs less than `best`; without `supersets`,
    only the minimal ones (none of its options could be left out). `reach[j]`: what `rentals[j:]` can free
    at most, so a branch that cannot get there is cut."""
    if picked:
        cost = set_cost(picked, now)
        if cost >= best:
            return  # a larger set costs no less
        if milli >= need_milli:
            if supersets or milli - min(freed[id(o)] for o in picked) < need_milli:
                yield cost, list(picked)  # without supersets: only a set none of whose options it can spare
            if not supersets:
                return
    if milli + reach[0] < need_milli:
        return  # even every rental left would not free enough
    for j, options in enumerate(rentals):
        for option in options:
            yield from _sets_freeing(
                rentals[j + 1 :],
                freed,
                reach[j + 1 :],
                milli + freed[id(option)],
                need_milli,
                best,
                now,
                (*picked, option),
                supersets,
            )


def _gang_nodes(
    snapshot: Snapshot,
    request: Request,
    candidates: Sequence[Running],
    need_milli: float,
    best: tuple,
    policy: Policy,
    now: float,
) -> list[list[_NodeRentals]]:
    """Per pool (GPU model and region: a gang never spans two of either), its schedulable nodes that could
    host one of the gang's nodes: those that take one as they are (`clear_now`), then those likeliest to
    clear for less than `best` (`_clearance_guess`), at most `node_count` + SEARCH_GANG_SPARE_NODES in all."""
    class_ids = set(nominate(snapshot, request)[0])
    shape_id = snapshot.intern_request(request)
    on_node = _freed_on_nodes(_cheaper_than(candidates, best, now))
    ranked: dict[tuple[str, str], list[tuple[tuple[float, float], int, bool]]] = {}
    for state in snapshot.nodes:
        if not state.schedulable or state.class_id not in class_ids:
            continue
        fits = state.free_milli >= need_milli
        if fits and best_option(snapshot, state.class_id, state.state_id, shape_id, request, policy) is None:
            continue  # free GPUs enough, yet its CPU, memory or GPU layout stops it: no set can say
        options = on_node.get(state.name, [])
        if not fits and not options:
            continue  # nothing on it that could go for less than `best`
        guess = (-1, 0.0) if fits else _clearance_guess(options, state, need_milli, now)
        if guess is not None:
            pool = (snapshot.classes[state.class_id].model.name, state.node.topology[0])
            ranked.setdefault(pool, []).append((guess, state.index, fits))
    keep = request.node_count + SEARCH_GANG_SPARE_NODES
    pools = [sorted(nodes)[:keep] for nodes in ranked.values() if len(nodes) >= request.node_count]
    return [[_gang_node(snapshot.nodes[i], on_node, fits, now) for _, i, fits in nodes] for nodes in pools]


def _freed_on_nodes(candidates: Sequence[Running]) -> dict[str, list[tuple[Running, float]]]:
    """Node -> (option, milli it frees there) for every candidate option on it, in `candidates`' order
    (`victim_cost`: the first is the node's cheapest)."""
    on_node: dict[str, dict[int, tuple[Running, float]]] = {}
    for candidate in candidates:
        if len(candidate.placement.nodes) == 1:  # most are: what it holds, computed once, is what it frees
            on_node.setdefault(candidate.placement.nodes[0].node, {})[id(candidate)] = (
                candidate,
                round(candidate.gpus * 1000),
            )
            continue
        for allocation in candidate.placement.nodes:
            here = on_node.setdefault(allocation.node, {})
            _, milli = here.get(id(candidate), (candidate, 0.0))
            here[id(candidate)] = (candidate, milli + sum(s.milli for s in allocation.slices))
    return {node: list(here.values()) for node, here in on_node.items()}


def _clearance_guess(
    options: Sequence[tuple[Running, float]], state: NodeState, need_milli: float, now: float
) -> tuple[float, float] | None:
    """A cheap guess at what freeing `need_milli` on a node costs, to rank nodes before searching them:
    options taken lowest tier and fewest GPU-seconds lost per milli first (a gang's loss shared among its
    nodes: `_share_here`) until enough is free, the last in part; None when all of them free too little."""
    milli = state.free_milli
    if milli + sum(freed for _, freed in options) < need_milli:
        return None
    rated = sorted(
        (o.request.tier, _share_here(o) * o.lost_gpu_s(now) / freed, freed)
        for o, freed in options
        if freed > 0
    )
    tier, lost = -1.0, 0.0
    for option_tier, rate, freed in rated:
        if milli >= need_milli:
            break
        tier, lost = max(tier, option_tier), lost + rate * min(freed, need_milli - milli)
        milli += freed
    return (tier, lost)


def _gang_node(
    state: NodeState, on_node: Mapping[str, list[tuple[Running, float]]], fits: bool, now: float
) -> _NodeRentals:
    """A node searched for a gang: clear as it is (`fits`), or its rentals."""
    if fits:
        return _NodeRentals(state.name, [], {}, [0.0], state.free_milli, clear_now=True)
    by_rental: dict[str, list[Running]] = {}
    for option, _ in on_node[state.name]:
        by_rental.setdefault(option.request.id, []).append(option)
    return _NodeRentals.of(state.name, by_rental, state.free_milli)


def _share_here(victim: Running) -> float:
    """The share of a victim's cost one of its nodes bears: all of a gang's nodes are freed at once."""
    return 1 / len({a.node for a in victim.placement.nodes})


def _clearances(local: _NodeRentals, need_milli: float, best: tuple, now: float) -> list[list[Running]]:
    """A node's cheapest sets (by their cost there: `_cost_here`) that free `need_milli` and cost less than
    `best`, none holding a smaller one that would do, the cheapest few of each highest tier (a union's
    tier is its dearest node's, so a dearer set here may cost the union nothing more); none for a node
    clear as it is."""
    if local.clear_now:
        return []
    sets = _sets_freeing(
        local.rentals, local.freed, local.reach, local.free_milli, need_milli, best, now, supersets=False
    )
    kept: dict[int, list[list[Running]]] = {}
    for victims in sorted((victims for _, victims in sets), key=lambda v: _cost_here(v, now)):
        same_tier = kept.setdefault(max(v.request.tier for v in victims), [])
        if len(same_tier) < SEARCH_GANG_CLEARANCES:
            same_tier.append(victims)
    return [victims for tier in sorted(kept) for victims in kept[tier]]


def _cost_here(victims: Sequence[Running], now: float) -> tuple[float, float, float, float, list[str]]:
    """What a node's clearance costs as `set_cost` counts, a gang's loss and GPUs shared among its nodes
    (`_share_here`): highest tier, GPU-seconds lost, highest offer, GPUs, then ids."""
    return (
        max(v.request.tier for v in victims),
        sum(_share_here(v) * v.lost_gpu_s(now) for v in victims),
        max(v.request.offered_micros_per_hour for v in victims),
        sum(_share_here(v) * v.gpus for v in victims),
        sorted(v.request.id for v in victims),
    )


@dataclass(frozen=True, slots=True)
class _Union:
    """Node clearances united: one option per rental (its eviction over its trim), what they free on each
    node searched, the nodes clear once they are gone, and the totals `set_cost` orders by (highest tier,
    GPU-seconds lost, highest offer, GPUs), kept as it grows so a step costs only the clearance added."""

    victims: Mapping[str, Running]
    freed: Mapping[str, float]
    cleared: frozenset[str]
    totals: tuple[float, float, float, float] = (-1, 0.0, -1, 0.0)
    last: int = -1  # the position of the last node whose clearance it took: later ones come after it

    def adding(
        self,
        position: int,
        clearance: Sequence[Running],
        free: Mapping[str, float],
        need_milli: float,
        now: float,
    ) -> _Union:
        """This union with the clearance of the node at `position`: a victim already in it (a gang) counts
        once, and a node searched (`free`: its free milli) is clear once what is free there reaches
        `need_milli`."""
        victims, freed = dict(self.victims), dict(self.freed)
        tier, lost, offer, gpus = self.totals
        for victim in clearance:
            held = victims.get(victim.request.id)
            if held is not None:
                if held.gpus >= victim.gpus:
                    continue  # the same option, or its eviction over this trim
                lost, gpus = lost - held.lost_gpu_s(now), gpus - held.gpus  # its trim, now its eviction
                _add_freed(freed, held, free, -1)
            victims[victim.request.id] = victim
            _add_freed(freed, victim, free, 1)
            tier = max(tier, victim.request.tier)
            offer = max(offer, victim.request.offered_micros_per_hour)
            lost, gpus = lost + victim.lost_gpu_s(now), gpus + victim.gpus
        cleared = self.cleared | {n for n, milli in freed.items() if free[n] + milli >= need_milli}
        return _Union(victims, freed, cleared, (tier, lost, offer, gpus), position)


def _add_freed(freed: dict[str, float], victim: Running, free: Mapping[str, float], sign: int) -> None:
    """Count (`sign` 1) or uncount (-1) what `victim` frees on each node searched (those in `free`)."""
    for allocation in victim.placement.nodes:
        if allocation.node in free:
            milli = sum(s.milli for s in allocation.slices)
            freed[allocation.node] = freed.get(allocation.node, 0.0) + sign * milli


def _combinations(
    nodes: Sequence[_NodeRentals], count: int, need_milli: float, best: tuple, now: float
) -> list[tuple[tuple, list[Running]]]:
    """(cost, set) for the cheapest unions of node clearances found that clear `count` of `nodes` and cost
    less than `best`: a beam search that adds the clearance of a node not yet clear at each step (nodes in
    order, so each set of nodes is made once), keeping the SEARCH_GANG_BEAM cheapest unions not yet enough
    (every one of them on a small enough fleet)."""
    free = {node.name: node.free_milli for node in nodes}
    beam = [_Union({}, {}, frozenset(node.name for node in nodes if node.clear_now))]
    done: list[_Union] = []
    for _ in range(count):
        grown: dict[frozenset[int], _Union] = {}  # by its victims: the same set clears the same nodes
        for union in beam:
            for position in range(union.last + 1, len(nodes)):
                if nodes[position].name in union.cleared:
                    continue
                for clearance in nodes[position].clearances:
                    child = union.adding(position, clearance, free, need_milli, now)
                    if child.totals < best[:4]:
                        grown.setdefault(frozenset(map(id, child.victims.values())), child)
        done.extend(union for union in grown.values() if len(union.cleared) >= count)
        short = [union for union in grown.values() if len(union.cleared) < count]
        beam = sorted(short, key=lambda union: union.totals)[:SEARCH_GANG_BEAM]
    done = sorted(done, key=lambda union: union.totals)[:SEARCH_FIT_TRIALS]  # no more are tried
    found = [(set_cost(list(union.victims.values()), now), list(union.victims.values())) for union in done]
    return [(cost, victims) for cost, victims in found if cost < best]


def fits_without(
    snapshot: Snapshot, request: Request, victims: Sequence[Running], policy: Policy
) -> Placement | None:
    """Where `request` would go if `victims` were gone (whole gangs); the snapshot is restored after."""
    undos: list[Callable[[], None]] = [
        snapshot.release(allocation) for victim in victims for allocation in victim.placement.nodes
    ]
    try:
        return trial_place(snapshot, request, policy)
    finally:
        for undo in reversed(undos):
            undo()
