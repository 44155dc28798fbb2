"""Bounded exact searches for the cheapest victim set (`set_cost`) that lets a request fit, run by
`choose_victims` after its greedy pass: per node, every set of its cheapest rentals that frees enough there.

Pure and deterministic; the snapshot is left as it was found (`fits_without` releases and undoes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from suanli.domain.plan import Placement
from suanli.domain.policies import Policy
from suanli.domain.request import Request
from suanli.domain.running import Running, set_cost, victim_cost
from suanli.domain.scheduler import trial_place
from suanli.domain.snapshot import Snapshot

SEARCH_RENTALS_PER_NODE = 10  # the cheapest rentals on a node that `_cheapest_on_one_node` combines
SEARCH_FIT_TRIALS = 64  # trial placements it may make: it is bounded however crowded the fleet


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
    less than `chosen` is a candidate, and the cheapest that fits wins; `chosen` when none does."""
    best = set_cost(chosen, now)
    need_milli = snapshot.least_gpus(request) * 1000 - 1e-6
    on_node: dict[str, dict[str, list[Running]]] = {}  # node -> rental id -> its options (whole, trim)
    for candidate in candidates:
        for node in {a.node for a in candidate.placement.nodes}:
            on_node.setdefault(node, {}).setdefault(candidate.request.id, []).append(candidate)
    found: list[tuple[tuple, list[Running]]] = []
    for node, by_rental in on_node.items():
        state = snapshot.by_name[node]
        if not state.schedulable:
            continue
        rentals = sorted(by_rental.values(), key=lambda options: victim_cost(options[0], now))
        rentals = rentals[:SEARCH_RENTALS_PER_NODE]
        freed = {
            id(o): sum(s.milli for a in o.placement.nodes if a.node == node for s in a.slices)
            for options in rentals
            for o in options
        }
        found.extend(_sets_freeing(rentals, freed, state.free_milli, need_milli, best, now))
    found.sort(key=lambda f: f[0])
    for _, victims in found[:SEARCH_FIT_TRIALS]:
        if fits_without(snapshot, request, victims, policy) is not None:
            return victims
    return chosen


def _sets_freeing(
    rentals: Sequence[list[Running]],
    freed: Mapping[int, float],
    milli: float,
    need_milli: float,
    best: tuple,
    now: float,
    picked: tuple[Running, ...] = (),
) -> Iterator[tuple[tuple, list[Running]]]:
    """(cost, set) for every set of one option per chosen rental that brings `milli` (free on the node, plus
    what each option frees there: `freed`) to `need_milli` and costs less than `best`."""
    if picked:
        cost = set_cost(picked, now)
        if cost >= best:
            return  # a larger set costs no less
        if milli >= need_milli:
            yield cost, list(picked)
    for j, options in enumerate(rentals):
        for option in options:
            yield from _sets_freeing(
                rentals[j + 1 :], freed, milli + freed[id(option)], need_milli, best, now, (*picked, option)
            )


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
