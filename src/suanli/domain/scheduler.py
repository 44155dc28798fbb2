"""`schedule(snapshot, queue, policy, now) -> Plan`: place what fits, say why the rest waits.

Phases for each request, in queue order: (1) nominate the node classes its selector, residency,
constraints and size allow; (2) enumerate the (class, state) groups where its per-node shape fits and score
each once; (3) take the best node, or for a gang the best nodes inside the smallest topology subtree
(leaf, pod, zone, region) that holds all of them; (4) apply it to the snapshot so later requests see it.
The snapshot comes back with the plan applied: it is the caller's working copy.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from suanli.domain.billing.money import money_pair_text
from suanli.domain.capacity import Option, options
from suanli.domain.images import RUNS_IMAGES_LABEL
from suanli.domain.plan import NodeAllocation, Pending, Placement, Plan, Reason, Repartition
from suanli.domain.policies import Policy, Score
from suanli.domain.quotas import Ledger, pinned
from suanli.domain.request import GpuSelector, MigSlice, Request, Tier, WholeGpus
from suanli.domain.snapshot import NodeState, Snapshot

TOPOLOGY_LEVELS = (4, 3, 2, 1)  # leaf, pod, zone, region
OPTION_CACHE_LIMIT = 200_000


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where the request's per-node part fits, with the policy's score for the best way."""

    score: Score
    state: NodeState
    option: Option


def schedule(
    snapshot: Snapshot, queue: Iterable[Request], policy: Policy, now: float, limits: Ledger | None = None
) -> Plan:
    """Decide placements for `queue` in priority order; deterministic for the same inputs. With `limits` (a
    cycle's quota and spend-cap ledger), a request its tenant's limits do not allow waits with their reason,
    and each placement is booked against them."""
    placements: list[Placement] = []
    pending: list[Pending] = []
    for request in order_queue(queue):
        held, off_limits = None, frozenset[str]()
        if limits is not None:
            held, off_limits = quota_gate(snapshot, limits, request, policy)
        if held is not None:
            pending.append(held)
            continue
        with snapshot.cordoned(off_limits):
            outcome = place(snapshot, request, policy)
        if isinstance(outcome, Placement):
            placements.append(outcome)
            if limits is not None:
                limits.take(landed(snapshot, request, outcome))
        else:
            pending.append(outcome)
    return Plan(tuple(placements), tuple(pending))


def quota_gate(
    snapshot: Snapshot, ledger: Ledger, request: Request, policy: Policy
) -> tuple[Pending | None, frozenset[str]]:
    """Why `request` must wait for its tenant's limits (None: it may start), and the nodes it must keep off:
    those of the models it may land on where its GPU quota has no room. It waits for its quota too when it
    fits now only on such nodes; when it fits nowhere now, it waits for capacity on the others."""
    held = ledger.check(request)
    if held is not None or not ledger.has_model_quotas(request.tenant):
        return held, frozenset()
    class_ids, _ = nominate(snapshot, request)
    models = {snapshot.classes[i].model.name for i in class_ids}
    full, reason = ledger.full_models(request, models)
    if reason is None:
        return None, frozenset()
    if full >= models:
        return reason, frozenset()
    full_classes = {i for i in class_ids if snapshot.classes[i].model.name in full}
    return _keep_off(snapshot, request, policy, full_classes, reason)


def floor_gate(
    snapshot: Snapshot, request: Request, policy: Policy, floor_of: Callable[[str, str], int | None]
) -> tuple[Pending | None, frozenset[str]]:
    """Why a spot `request` with a bid must wait for the floor (None: it may start), and the nodes it must
    keep off: those of pools (model, region) whose floor per GPU-hour, `floor_of`, is above its bid. It
    waits when every pool it may land in is such a pool, or when it fits now only in one."""
    bid = request.bid_micros_per_hour
    if request.tier is not Tier.SPOT or bid is None:  # no bid: it pays the spot price, never below the floor
        return None, frozenset()
    class_ids, _ = nominate(snapshot, request)
    above: dict[int, int] = {}
    for i in class_ids:
        floor = floor_of(snapshot.classes[i].model.name, snapshot.classes[i].region)
        if floor is not None and bid < floor:
            above[i] = floor
    if not above:
        return None, frozenset()
    below_every = len(above) == len(class_ids)
    lowest = min(above.values())
    reason = Pending(
        request.id,
        Reason.BID_BELOW_FLOOR,
        "bid {}/GPU-h is below the spot floor {}".format(*money_pair_text(bid, lowest))
        + ("" if below_every else " of the pools with room now; it waits for one whose floor it meets"),
    )
    if below_every:
        return reason, frozenset()
    return _keep_off(snapshot, request, policy, above.keys(), reason)


def _keep_off(
    snapshot: Snapshot, request: Request, policy: Policy, class_ids: Collection[int], reason: Pending
) -> tuple[Pending | None, frozenset[str]]:
    """The nodes of `class_ids` for `request` to keep off; or `reason` to wait with, when it fits now only
    on them (it fits nowhere now: it waits for capacity on the others)."""
    off_limits = frozenset(s.name for s in snapshot.nodes if s.class_id in class_ids)
    if trial_place(snapshot, request, policy, off_limits) is None and trial_place(snapshot, request, policy):
        return reason, frozenset()
    return None, off_limits


def trial_place(
    snapshot: Snapshot, request: Request, policy: Policy, cordon: Collection[str] = ()
) -> Placement | None:
    """Where `request` would go now, off the nodes in `cordon`; the snapshot is left as it was."""
    with snapshot.cordoned(cordon):
        outcome = place(snapshot, request, policy)
    if isinstance(outcome, Placement):
        snapshot.unplace(outcome)
        return outcome
    return None


def landed(snapshot: Snapshot, request: Request, placement: Placement) -> Request:
    """`request` as its tenant's GPU quotas count it once placed: on the model of the nodes it took."""
    node = snapshot.by_name[placement.nodes[0].node]
    return pinned(request, snapshot.classes[node.class_id].model.name)


def order_queue(queue: Iterable[Request]) -> list[Request]:
    """Tier first (reserved, on-demand, spot), spot by higher offer (no bid first), then age, then id."""
    return sorted(queue, key=lambda r: (-r.tier, -r.offered_micros_per_hour, r.submitted_at_s, r.id))


def place(snapshot: Snapshot, request: Request, policy: Policy) -> Placement | Pending:
    """Place one request on the snapshot (mutating it), or say why it cannot be placed now."""
    policy.bind(snapshot)
    class_ids, reason = nominate(snapshot, request)
    if not class_ids:
        return Pending(request.id, reason, _never_fits(snapshot, request, reason))
    if request.node_count == 1:
        signature = fit_signature(request)
        if snapshot.no_fit_cache.get(signature) == snapshot.capacity_epoch:
            return Pending(request.id, Reason.NO_CAPACITY, _explain(Reason.NO_CAPACITY, request))
        candidate = best_single(snapshot, class_ids, request, policy)
        if candidate is None:
            snapshot.no_fit_cache[signature] = snapshot.capacity_epoch
            return Pending(request.id, Reason.NO_CAPACITY, _explain(Reason.NO_CAPACITY, request))
        return apply_candidates(snapshot, request, [candidate], "")
    return place_gang(snapshot, class_ids, request, policy)


def never_fits(snapshot: Snapshot, request: Request) -> Pending | None:
    """Why `request` could not be placed even with every node of `snapshot`'s fleet empty, or None: what a
    new rental is refused for rather than left waiting for ever (a GPU count no node has, too many nodes)."""
    class_ids, reason = nominate(snapshot, request)
    if not class_ids:
        return Pending(request.id, reason, _never_fits(snapshot, request, reason))
    most = _most_nodes_in_a_region(snapshot, class_ids)
    if request.node_count > 1 and most < request.node_count:
        return Pending(request.id, Reason.GANG_TOO_LARGE, _explain(Reason.GANG_TOO_LARGE, request, most))
    return None


def nominate(snapshot: Snapshot, request: Request) -> tuple[list[int], Reason]:
    """Node classes that could ever host the request, or the first filter that ruled all of them out."""
    cache = snapshot.nomination_cache
    signature = fit_signature(request)
    cached = cache.get(signature)
    if cached is not None:
        return cached
    stages = (
        (Reason.NO_MATCHING_GPU, lambda c: c.selector_allows(request.selector, request.shape)),
        (Reason.RESIDENCY, lambda c: c.residency_allows(request)),
        (Reason.CONSTRAINTS, lambda c: c.constraints_allow(request)),
        (Reason.NODE_TOO_SMALL, lambda c: c.big_enough(request)),
    )
    survivors = list(range(len(snapshot.classes)))
    reason = Reason.NO_CAPACITY
    for stage_reason, allows in stages:
        survivors = [i for i in survivors if allows(snapshot.classes[i])]
        if not survivors:
            reason = stage_reason
            break
    cache[signature] = (survivors, reason)
    return survivors, reason


def fit_signature(request: Request) -> tuple:
    """Everything about a one-node request that decides where it can fit (not how it is ranked)."""
    return (
        request.shape,
        request.selector,
        request.constraints.jurisdictions,
        request.constraints.regions,
        request.constraints.providers,
        tuple(sorted(request.constraints.labels.items())),
        request.cpu_milli,
        request.memory_mib,
    )


def best_single(
    snapshot: Snapshot, class_ids: Sequence[int], request: Request, policy: Policy
) -> Candidate | None:
    """The best-scoring node for a one-node request; ties go to the first node, or a random one."""
    best_score: Score | None = None
    ties: list[tuple[dict[int, None], Option, list[Option], tuple]] = []
    shape_id = snapshot.intern_request(request)
    memo = policy.memo
    reusing = _reusing_states(snapshot, class_ids, request)
    if reusing is not None and not policy.random_ties:
        first = _first_reusing(snapshot, class_ids, reusing, shape_id, request, policy)
        if first is not None:
            return first
    for class_id in class_ids:
        for state_id, members in snapshot.groups[class_id].items():
            if reusing is not None and state_id not in reusing:
                continue  # carving here loses to the idle instance a state in `reusing` has (`_carves`)
            scored = memo.get((class_id, state_id, shape_id), _MISSING)  # inlined: this loop is the hot path
            if scored is _MISSING:
                scored = best_option(snapshot, class_id, state_id, shape_id, request, policy)
            if scored is None:
                continue
            score, option, found, key = scored
            if best_score is None or score < best_score:
                best_score, ties = score, [(members, option, found, key)]
            elif score == best_score:
                ties.append((members, option, found, key))
    if best_score is None:
        return None
    if not policy.random_ties:
        index, option = min((min(members), option) for members, option, _, _ in ties)
        return Candidate(best_score, snapshot.nodes[index], option)
    rng = random.Random(f"{policy.seed}:{request.id}")
    pick = rng.randrange(sum(len(members) for members, _, _, _ in ties))
    for members, option, found, key in ties:
        if pick < len(members):
            chosen = option if not policy.random_gpu else _random_option(rng, found, key[2])
            return Candidate(best_score, snapshot.nodes[list(members)[pick]], chosen)
        pick -= len(members)
    raise AssertionError("unreachable: the pick is below the number of tied nodes")


def _random_option(rng: random.Random, found: list[Option], gpus: tuple) -> Option:
    """A uniformly random fitting GPU: each option weighted by how many GPUs are in its entry's state."""
    if len(found) == 1:
        return found[0]
    weights = [sum(1 for entry in gpus if entry == option.choices[0].before) for option in found]
    return rng.choices(found, weights=weights)[0]


def place_gang(
    snapshot: Snapshot, class_ids: Sequence[int], request: Request, policy: Policy
) -> Placement | Pending:
    """All `node_count` nodes of one GPU model inside the smallest topology subtree that holds them, or
    nothing: a gang's ranks form one communicator and step at its slowest rank's pace, so models never mix."""
    by_model = _gang_candidates(snapshot, class_ids, request, policy)
    need = request.node_count
    alike = max((len(candidates) for candidates in by_model.values()), default=0)  # most of one model
    if alike < need:
        most = _most_nodes_in_a_region(snapshot, class_ids)
        if most < need:  # even with every node empty: it never fits, and must not block anyone
            return Pending(request.id, Reason.GANG_TOO_LARGE, _explain(Reason.GANG_TOO_LARGE, request, most))
        reason = Reason.GANG_INCOMPLETE if alike else Reason.NO_CAPACITY
        return Pending(request.id, reason, _explain(reason, request, alike))
    for depth in TOPOLOGY_LEVELS:
        best: tuple[tuple, tuple[str, ...], list[Candidate]] | None = None
        for model, candidates in by_model.items():
            subtrees: dict[tuple[str, ...], list[Candidate]] = {}
            for candidate in candidates:
                subtrees.setdefault(candidate.state.node.topology[:depth], []).append(candidate)
            for path, members in subtrees.items():
                if len(members) < need:
                    continue
                members.sort(key=lambda c: (c.score, c.state.index))
                chosen = members[:need]
                rank = (tuple(sum(s) for s in zip(*(c.score for c in chosen), strict=True)), path, model)
                if best is None or rank < best[0]:
                    best = (rank, path, chosen)
        if best is not None:
            return apply_candidates(snapshot, request, best[2], "/".join(best[1]))
    most = _most_nodes_in_a_region(snapshot, class_ids)
    if most < need:
        return Pending(request.id, Reason.GANG_TOO_LARGE, _explain(Reason.GANG_TOO_LARGE, request, most))
    return Pending(request.id, Reason.GANG_INCOMPLETE, _explain(Reason.GANG_INCOMPLETE, request, alike))


def _gang_candidates(
    snapshot: Snapshot, class_ids: Sequence[int], request: Request, policy: Policy
) -> dict[str, list[Candidate]]:
    """GPU model -> the nodes where one of the gang's nodes fits now, with the policy's best way there."""
    by_model: dict[str, list[Candidate]] = {}
    shape_id = snapshot.intern_request(request)
    for class_id in class_ids:
        model = snapshot.classes[class_id].model.name
        for state_id, members in snapshot.groups[class_id].items():
            scored = best_option(snapshot, class_id, state_id, shape_id, request, policy)
            if scored is not None:
                score, option, _, _ = scored
                by_model.setdefault(model, []).extend(
                    Candidate(score, snapshot.nodes[i], option) for i in members
                )
    return by_model


def _most_nodes_in_a_region(snapshot: Snapshot, class_ids: Sequence[int]) -> int:
    """The most nodes of these classes of one GPU model in one region, cordoned ones included: a gang's
    ceiling (static)."""
    key = ("gang_ceiling", tuple(class_ids))
    cached = snapshot.nomination_cache.get(key)
    if cached is not None:
        return cached
    wanted = set(class_ids)
    per_pool: dict[tuple[str, str], int] = {}
    for state in snapshot.nodes:
        if state.class_id in wanted:
            pool = (snapshot.classes[state.class_id].model.name, state.node.topology[0])
            per_pool[pool] = per_pool.get(pool, 0) + 1
    most = max(per_pool.values(), default=0)
    snapshot.nomination_cache[key] = most
    return most


def best_option(
    snapshot: Snapshot, class_id: int, state_id: int, shape_id: int, request: Request, policy: Policy
) -> tuple[Score, Option, list[Option], tuple] | None:
    """The policy's best way to fit the request's per-node part on a (class, state), memoised per policy."""
    memo = policy.memo
    signature = (class_id, state_id, shape_id)
    found = memo.get(signature, _MISSING)
    if found is _MISSING:
        if len(memo) > OPTION_CACHE_LIMIT:
            memo.clear()
        key = snapshot.state_keys[state_id]
        cls = snapshot.classes[class_id]
        fits = options(cls, key, request)
        if fits and isinstance(request.shape, MigSlice):  # an idle instance first, anywhere: see `_carves`
            carves = min(_carves(option) for option in fits)
            score, index = min(
                ((carves, *policy.score(class_id, cls, key, option)), i)
                for i, option in enumerate(fits)
                if _carves(option) == carves
            )
            found = (score, fits[index], fits, key)
        elif fits:
            score, index = min((policy.score(class_id, cls, key, option), i) for i, option in enumerate(fits))
            found = (score, fits[index], fits, key)
        else:
            found = None
        memo[signature] = found
    return found


_MISSING = object()


def _reusing_states(snapshot: Snapshot, class_ids: Sequence[int], request: Request) -> set[int] | None:
    """For a MIG request, the node states with an idle instance of its profile when there are any (the
    others would only carve one, and lose to them); None otherwise: every state is scored."""
    shape = request.shape
    if not isinstance(shape, MigSlice):
        return None
    idle = snapshot.nomination_cache.setdefault(("idle MIG", shape.profile), {})  # states never change
    found = set()
    for class_id in class_ids:
        for state_id in snapshot.groups[class_id]:
            has = idle.get(state_id)
            if has is None:
                has = idle[state_id] = _has_idle(snapshot.state_keys[state_id], shape.profile)
            if has:
                found.add(state_id)
    return found or None


def _first_reusing(
    snapshot: Snapshot,
    class_ids: Sequence[int],
    reusing: set[int],
    shape_id: int,
    request: Request,
    policy: Policy,
) -> Candidate | None:
    """The first node (by index) with an idle instance of the MIG request's profile where it fits, on the GPU
    the policy scores best among those it would reuse; None when it fits on none of them (CPU, memory)."""
    groups = [
        (min(members), class_id, state_id)
        for class_id in class_ids
        for state_id, members in snapshot.groups[class_id].items()
        if state_id in reusing
    ]
    for index, class_id, state_id in sorted(groups):
        scored = best_option(snapshot, class_id, state_id, shape_id, request, policy)
        if scored is not None and scored[0][0] == 0:  # it takes an idle instance (`_carves` 0)
            return Candidate(scored[0], snapshot.nodes[index], scored[1])
    return None


def _has_idle(key: tuple, profile: str) -> bool:
    """Whether a node state has an idle MIG instance of `profile` on one of its GPUs."""
    return any(not busy and name == profile for _, _, layout in key[2] for _, name, busy in layout)


def _carves(option: Option) -> int:
    """1 when `option` makes a MIG instance (a repartition) rather than take an idle one: a MIG request
    goes to an idle instance of its profile on any node before one is carved out of idle smaller ones (the
    operator's layout kept, no instance destroyed), whatever the policy's score; 0 otherwise."""
    return int(any(c.mig_option is not None and c.mig_option.repartitions for c in option.choices))


def apply_candidates(
    snapshot: Snapshot, request: Request, chosen: list[Candidate], subtree: str
) -> Placement:
    """Take the chosen candidates' capacity on the snapshot: the placement, with any MIG repartitions."""
    allocations: list[NodeAllocation] = []
    repartitions: list[Repartition] = []
    for candidate in chosen:
        allocation = snapshot.assign(
            candidate.state, request.cpu_milli, request.memory_mib, candidate.option.choices
        )
        allocations.append(allocation)
        for choice, piece in zip(candidate.option.choices, allocation.slices, strict=True):
            option = choice.mig_option
            if option is not None and not option.reuse:
                destroyed = tuple((start, name) for start, name, _ in option.destroyed)
                repartitions.append(
                    Repartition(allocation.node, piece.gpu_index, destroyed, (option.start, option.profile))
                )
    return Placement(request.id, tuple(allocations), subtree, tuple(repartitions))


def most_gpus_per_node(snapshot: Snapshot, selector: GpuSelector) -> int:
    """The most whole GPUs matching `selector` on one node of the fleet (0: no node has one)."""
    one = WholeGpus(1)
    return max((c.gpu_count for c in snapshot.classes if c.selector_allows(selector, one)), default=0)


def _never_fits(snapshot: Snapshot, request: Request, reason: Reason) -> str:
    """Why no node of the fleet could ever take the request, naming what to change where it can: more whole
    GPUs than any matching node has, or regions the fleet does not have."""
    classes = snapshot.classes
    shape = request.shape
    if reason is Reason.NO_MATCHING_GPU and isinstance(shape, WholeGpus):
        most = most_gpus_per_node(snapshot, request.selector)
        if 0 < most < shape.count:
            return (
                f"no matching node has {shape.count} GPUs (at most {most} on one node): ask for {most} or "
                "fewer per node, on more nodes"
            )
    if reason is Reason.RESIDENCY:
        asked = request.constraints.jurisdictions
        held = sorted({r.jurisdiction for r in snapshot.fleet.regions.values()} - set(asked))
        return (
            f"no matching GPU in an allowed jurisdiction ({', '.join(sorted(asked))}); the fleet's "
            f"others: {', '.join(held) or 'none'} (codes as the fleet names them, e.g. EU, not eu)"
        )
    wanted = request.constraints.regions
    if reason is Reason.CONSTRAINTS and wanted:
        regions = {c.region for c in classes}
        if not wanted & regions:
            return (
                f"no node in region {', '.join(sorted(wanted))}; the fleet's regions: "
                f"{', '.join(sorted(regions))}"
            )
    return _explain(reason, request)


def _explain(reason: Reason, request: Request, feasible_nodes: int = 0) -> str:
    messages = {
        Reason.NO_MATCHING_GPU: "no GPU in the fleet matches the selector and shape",
        Reason.RESIDENCY: "no matching GPU in an allowed jurisdiction "
        f"({', '.join(sorted(request.constraints.jurisdictions))})",
        Reason.CONSTRAINTS: "regions, providers or labels rule out every matching node"
        + (
            " (it names an image: only nodes whose agent runs containers take it)"
            if RUNS_IMAGES_LABEL in request.constraints.labels
            else ""
        ),
        Reason.NODE_TOO_SMALL: f"no matching node has {request.cpu_milli} CPU milli "
        f"and {request.memory_mib} MiB",
        Reason.NO_CAPACITY: "matching nodes are busy; waiting for free capacity",
        Reason.GANG_INCOMPLETE: f"{feasible_nodes} nodes of one GPU model fit, {request.node_count} needed "
        "in one subtree",
        Reason.GANG_TOO_LARGE: f"at most {feasible_nodes} matching nodes of one GPU model in one region, "
        f"even empty; {request.node_count} needed",
    }
    return messages.get(reason, reason.value)
