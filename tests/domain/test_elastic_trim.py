"""Trims: an elastic victim (`Running.least`) gives back, at its deadline, only what the preemptor's promise
takes of its part above its least size, and runs on with the rest; a gang keeps whole nodes of its shape."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from test_preemption import POLICY, snapshot_of, start, state

from suanli.domain.elastic_start import least_size
from suanli.domain.plan import Placement
from suanli.domain.preemption import choose_victims, trim_of
from suanli.domain.request import Request, Tier, WholeGpus
from suanli.domain.running import Running
from suanli.domain.scheduler import place


def elastic(running: Running, min_gpus: int) -> Running:
    """`running` as an elastic rental that may run on `min_gpus` GPUs."""
    request = replace(running.request, min_gpus=min_gpus)
    return replace(running, request=request, least=least_size(request))


def held_gpus(placement) -> set[tuple[str, int]]:
    return {(a.node, s.gpu_index) for a in placement.nodes for s in a.slices}


def test_an_elastic_victim_gives_back_only_the_gpus_the_preemptor_takes_and_runs_on():
    snap = snapshot_of(1, 8)
    victim = elastic(start(snap, "trainer", 8, Tier.SPOT, at=0), min_gpus=2)
    before = state(snap)
    asked = Request("od", WholeGpus(4), tier=Tier.ON_DEMAND)
    decision = choose_victims(snap, asked, [victim], POLICY, now=100)
    assert state(snap) == before
    (trim,) = decision.victims
    assert trim.request_id == "trainer" and trim.keeps is not None
    assert trim.gpus == 4 and trim.keeps.gpus == 4 and trim.lost_gpu_s == 400  # 4 GPUs x 100 s
    assert trim.deadline_s == 130
    kept, promised = held_gpus(trim.keeps), held_gpus(decision.promised)
    assert not kept & promised and kept | promised == held_gpus(victim.placement)


def test_a_trim_is_cheaper_than_evicting_a_rigid_rental_of_the_same_tier():
    snap = snapshot_of(2, 8)
    trainer = elastic(start(snap, "trainer", 8, Tier.SPOT, at=50), min_gpus=4)
    rigid = start(snap, "rigid", 8, Tier.SPOT, at=50)  # would lose 8 GPUs' work; the trim 4 GPUs' use
    decision = choose_victims(
        snap, Request("od", WholeGpus(4), tier=Tier.ON_DEMAND), [rigid, trainer], POLICY, 100
    )
    assert [(v.request_id, v.gpus, v.keeps is not None) for v in decision.victims] == [("trainer", 4, True)]


def test_a_gang_is_trimmed_by_whole_nodes_and_keeps_its_shape():
    snap = snapshot_of(4, 8)
    gang = elastic(start(snap, "gang", 8, Tier.SPOT, at=0, nodes=4), min_gpus=12)  # at least 2 nodes
    assert least_size(gang.request) == (2, 8)
    decision = choose_victims(snap, Request("od", WholeGpus(8), tier=Tier.ON_DEMAND), [gang], POLICY, 100)
    (trim,) = decision.victims
    assert trim.keeps is not None and len(trim.keeps.nodes) == 3 and trim.gpus == 8
    assert all(len(a.slices) == 8 for a in trim.keeps.nodes)  # whole nodes, never a half node
    two_nodes = Request("od2", WholeGpus(8), node_count=2, tier=Tier.ON_DEMAND)
    (trim,) = choose_victims(snap, two_nodes, [gang], POLICY, 100).victims
    assert trim.keeps is not None and len(trim.keeps.nodes) == 2


def test_a_victim_whose_least_size_is_not_enough_is_evicted_whole():
    snap = snapshot_of(1, 8)
    victim = elastic(start(snap, "trainer", 8, Tier.SPOT, at=0), min_gpus=4)
    decision = choose_victims(snap, Request("od", WholeGpus(6), tier=Tier.ON_DEMAND), [victim], POLICY, 100)
    (eviction,) = decision.victims
    assert eviction.keeps is None and eviction.gpus == 8 and eviction.lost_gpu_s == 800
    assert trim_of(start(snapshot_of(1, 8), "rigid", 8, Tier.SPOT, at=0)) is None
    assert trim_of(replace(victim, borrowed=True)) is None  # borrowed GPUs are taken back whole


def test_the_trim_of_one_rental_and_the_eviction_of_another_together():
    snap = snapshot_of(2, 8)
    trainer = elastic(start(snap, "trainer", 8, Tier.SPOT, at=0), min_gpus=2)
    rigid = start(snap, "rigid", 8, Tier.SPOT, at=90)
    gang = Request("od", WholeGpus(6), node_count=2, tier=Tier.ON_DEMAND)  # 6 GPUs on each of two nodes
    decision = choose_victims(snap, gang, [trainer, rigid], POLICY, 100)
    victims = {v.request_id: v for v in decision.victims}
    assert victims["rigid"].keeps is None
    assert victims["trainer"].keeps is not None and victims["trainer"].keeps.gpus == 2


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(2, 8), st.integers(1, 8), st.booleans()), min_size=1, max_size=4),
    asked=st.integers(1, 8),
    asked_nodes=st.integers(1, 2),
)
def test_a_trim_keeps_at_least_the_least_size_and_gives_the_promise_what_it_takes(sizes, asked, asked_nodes):
    snap = snapshot_of(4, 8)
    running = []
    for n, (gpus, least, is_elastic) in enumerate(sizes):
        job = start(snap, f"j{n}", gpus, Tier.SPOT, at=n)
        running.append(elastic(job, min(least, gpus)) if is_elastic else job)
    before = state(snap)
    request = Request("od", WholeGpus(asked), node_count=asked_nodes, tier=Tier.ON_DEMAND)
    if isinstance(place(snap, request, POLICY), Placement):
        return  # it fits as it is: admission asks for victims only for a request that does not
    decision = choose_victims(snap, request, running, POLICY, 100)
    assert state(snap) == before
    if decision is None:
        return
    by_id = {r.request.id: r for r in running}
    given_back: set[tuple[str, int]] = set()
    for victim in decision.victims:
        job = by_id[victim.request_id]
        if victim.keeps is None:
            given_back |= held_gpus(job.placement)
            continue
        assert job.request.min_gpus is not None and victim.keeps.gpus >= job.request.min_gpus
        assert held_gpus(victim.keeps) < held_gpus(job.placement)
        given_back |= held_gpus(job.placement) - held_gpus(victim.keeps)
    assert held_gpus(decision.promised) <= given_back | _free(snap)


def _free(snap) -> set[tuple[str, int]]:
    return {(n.name, i) for n in snap.nodes for i, entry in enumerate(n.gpus) if entry[0] == 1000}


def test_a_victim_under_a_trims_notice_is_planned_to_run_on_past_its_deadline():
    """Backfill plans a victim under notice as ending at its deadline; a trimmed one runs on with what it
    keeps, so the plan keeps its declared end (what it gives back is promised to its preemptor)."""
    snap = snapshot_of(1, 8)
    victim = elastic(start(snap, "trainer", 8, Tier.SPOT, at=0), min_gpus=2)
    victim = replace(victim, request=replace(victim.request, max_duration_s=1000))
    (trim,) = choose_victims(
        snap, Request("od", WholeGpus(4), tier=Tier.ON_DEMAND), [victim], POLICY, 100
    ).victims
    noticed = replace(victim, preempted_by="od", notice_deadline_s=trim.deadline_s, keeps=trim.keeps)
    assert noticed.expected_end_s == 1000
    assert replace(noticed, keeps=None).expected_end_s == trim.deadline_s == 130
