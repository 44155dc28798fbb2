"""Elastic rentals: grow a running rental (more GPUs on its nodes, or more nodes near them) or shrink it.

Pure functions over the snapshot, like `place`: a grow that succeeds takes the capacity on the snapshot and
returns the added part as a Placement; one that fails leaves the snapshot as it was and says why. New nodes
are of the model the rental runs on (its rate per GPU stays right) and go as close as the topology allows
to the rental's nodes: the same leaf first, then the same pod, zone, region; among equally close nodes the
policy's score decides. `shrink` gives capacity back and returns what the rental keeps and what it
released.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from suanli.domain.errors import RequestError
from suanli.domain.plan import NodeAllocation, Pending, Placement, Reason
from suanli.domain.policies import Policy
from suanli.domain.request import Request, WholeGpus
from suanli.domain.scheduler import Candidate, apply_candidates, best_option, nominate
from suanli.domain.snapshot import Snapshot


def grow(
    snapshot: Snapshot,
    request: Request,
    placement: Placement,
    policy: Policy,
    *,
    extra_nodes: int = 0,
    extra_gpus_per_node: int = 0,
) -> Placement | Pending:
    """The added part of `request`'s rental: `extra_gpus_per_node` on each of its nodes (all or nothing),
    then `extra_nodes` more nodes of its per-node shape placed nearest its nodes; or why it cannot grow."""
    if extra_nodes < 0 or extra_gpus_per_node < 0 or extra_nodes + extra_gpus_per_node == 0:
        raise RequestError("grow by at least one node or one GPU per node", field="grow")
    policy.bind(snapshot)
    added: list[NodeAllocation] = []
    if extra_gpus_per_node:
        widen = replace(
            request, shape=WholeGpus(extra_gpus_per_node), node_count=1, cpu_milli=0, memory_mib=0
        )
        for allocation in placement.nodes:
            outcome = _place_on(snapshot, widen, allocation.node, policy)
            if outcome is None:
                _undo(snapshot, added)
                return Pending(
                    request.id,
                    Reason.NO_CAPACITY,
                    f"node {allocation.node} has no GPU free"
                    if extra_gpus_per_node == 1
                    else f"node {allocation.node} does not have {extra_gpus_per_node} more GPUs free",
                )
            added.append(outcome)
    if extra_nodes:
        more = _place_near(snapshot, request, placement, policy, extra_nodes)
        if isinstance(more, Pending):
            _undo(snapshot, added)
            return more
        added.extend(more.nodes)
    return Placement(request.id, tuple(added), _common_path(snapshot, placement, added))


def shrink(
    snapshot: Snapshot,
    placement: Placement,
    *,
    release_nodes: Collection[str] = (),
    fewer_nodes: int = 0,
    fewer_gpus_per_node: int = 0,
) -> tuple[Placement, Placement]:
    """(kept, released): release the named nodes, or the `fewer_nodes` loneliest ones (fewest of the rental's
    nodes in their leaf, last first), and `fewer_gpus_per_node` whole GPUs from each node it keeps."""
    names = {a.node for a in placement.nodes}
    unknown = set(release_nodes) - names
    if unknown:
        raise RequestError(f"not part of the rental: {', '.join(sorted(unknown))}", field="release_nodes")
    dropped = set(release_nodes) | set(_loneliest(snapshot, placement, set(release_nodes), fewer_nodes))
    if len(dropped) >= len(placement.nodes):
        raise RequestError("a rental keeps at least one node; end it instead", field="fewer_nodes")
    kept: list[NodeAllocation] = []
    released: list[NodeAllocation] = []
    for allocation in placement.nodes:
        if allocation.node in dropped:
            snapshot.release(allocation)
            released.append(allocation)
            continue
        if fewer_gpus_per_node:
            whole = [s for s in allocation.slices if s.is_whole]
            if len(whole) <= fewer_gpus_per_node:
                raise RequestError(f"node {allocation.node} holds {len(whole)} whole GPUs", field="gpus")
            gone = tuple(whole[-fewer_gpus_per_node:])
            part = NodeAllocation(allocation.node, 0, 0, gone)
            snapshot.release(part)
            released.append(part)
            allocation = replace(allocation, slices=tuple(s for s in allocation.slices if s not in gone))
        kept.append(allocation)
    kept_placement = replace(placement, nodes=tuple(kept), repartitions=())
    return kept_placement, Placement(placement.request_id, tuple(released))


def _place_on(snapshot: Snapshot, request: Request, node: str, policy: Policy) -> NodeAllocation | None:
    state = snapshot.by_name[node]
    if not state.schedulable:
        return None
    shape_id = snapshot.intern_request(request)
    scored = best_option(snapshot, state.class_id, state.state_id, shape_id, request, policy)
    if scored is None:
        return None
    return snapshot.assign(state, 0, 0, scored[1].choices)


def _place_near(
    snapshot: Snapshot, request: Request, placement: Placement, policy: Policy, count: int
) -> Placement | Pending:
    """`count` more nodes of the model the rental runs on, in its region, nearest its nodes first."""
    class_ids, reason = nominate(snapshot, request)
    if not class_ids:
        return Pending(request.id, reason, f"no node class can host it ({reason.value})")
    model = running_model(snapshot, placement)  # a gang never mixes models, grown or not
    class_ids = [i for i in class_ids if snapshot.classes[i].model.name == model]
    own = {a.node for a in placement.nodes}
    paths = [snapshot.by_name[n].node.topology for n in own]
    regions = {snapshot.by_name[n].node.region for n in own}  # a gang never spans regions, grown or not
    shape_id = snapshot.intern_request(request)
    ranked: list[tuple[int, tuple, int, Candidate]] = []
    for class_id in class_ids:
        for state_id, members in snapshot.groups[class_id].items():
            scored = best_option(snapshot, class_id, state_id, shape_id, request, policy)
            if scored is None:
                continue
            for index in members:
                state = snapshot.nodes[index]
                if state.name in own or state.node.region not in regions:
                    continue
                near = max(_shared(state.node.topology, p) for p in paths)
                ranked.append((-near, scored[0], index, Candidate(scored[0], state, scored[1])))
    if len(ranked) < count:
        # what fits of the nodes it would add (an elastic gang tries fewer, down to one): "0 nodes fit, 1
        # more needed" under "waiting to grow by 2 nodes" read as two different needs
        fit = (
            f"no more {model} node fits it" if not ranked else f"only {len(ranked)} more {model} nodes fit it"
        )
        return Pending(request.id, Reason.NO_CAPACITY, f"{fit} in its region")
    ranked.sort(key=lambda r: r[:3])
    return apply_candidates(snapshot, request, [r[3] for r in ranked[:count]], "")


def running_model(snapshot: Snapshot, placement: Placement) -> str:
    """The GPU model a rental runs on: its first node's (every node of a gang has the same)."""
    return snapshot.classes[snapshot.by_name[placement.nodes[0].node].class_id].model.name


def _shared(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    depth = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        depth += 1
    return depth


def _common_path(snapshot: Snapshot, placement: Placement, added: list[NodeAllocation]) -> str:
    paths = [snapshot.by_name[a.node].node.topology for a in (*placement.nodes, *added)]
    depth = min(_shared(paths[0], p) for p in paths)
    return "/".join(paths[0][:depth])


def _loneliest(snapshot: Snapshot, placement: Placement, skip: set[str], count: int) -> list[str]:
    leaf_of = {a.node: snapshot.by_name[a.node].node.topology for a in placement.nodes if a.node not in skip}
    population: dict[tuple[str, ...], int] = {}
    for path in leaf_of.values():
        population[path] = population.get(path, 0) + 1
    order = sorted(leaf_of, key=lambda n: (population[leaf_of[n]], -list(leaf_of).index(n)))
    return order[:count]


def _undo(snapshot: Snapshot, allocations: list[NodeAllocation]) -> None:
    for allocation in allocations:
        snapshot.release(allocation)
