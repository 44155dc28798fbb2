"""The MIG layouts agents report, stored per node (SQLite and PostgreSQL): a report that changes nothing is
no change, the scheduler's read gives each reported node's GPUs back as reported, and a new leader lays
its snapshot out by them."""

from __future__ import annotations

from pathlib import Path

from conftest import T0, SettableClock
from suanli.app.fleet import FleetCache
from suanli.app.records import Rental, RentalSpec, Tenant
from suanli.app.scheduling import Scheduler
from suanli.domain.catalog_data import CATALOG
from suanli.domain.queue_order import PLATFORM_QUEUE
from suanli.store.agent_repositories import SqlAgentUnitOfWork
from suanli.store.db import session_factory


def test_a_reported_layout_is_kept_per_node_and_only_a_different_one_is_a_change(store) -> None:
    engine, _ = store
    sessions = session_factory(engine)
    with SqlAgentUnitOfWork(sessions) as uow:
        for node in ("mig-a", "mig-b"):
            uow.agents.put_node(node, f"digest-{node}", {"gpus": []}, T0)
        carved = {0: [(6, "1g.10gb", True), (0, "4g.40gb", False)], 1: []}
        assert uow.agents.set_mig_layouts("mig-a", carved) is True
        same = {1: [], 0: [(0, "4g.40gb", False), (6, "1g.10gb", True)]}
        assert uow.agents.set_mig_layouts("mig-a", same) is False
        uow.commit()
    with SqlAgentUnitOfWork(sessions) as uow:
        assert uow.fleet.mig_layouts() == {"mig-a": {0: ((0, "4g.40gb", False), (6, "1g.10gb", True)), 1: ()}}
        before = uow.fleet.mig_layouts_revision()
        assert uow.agents.set_mig_layouts("mig-a", {0: [(0, "7g.80gb", False)], 1: []}) is True
        uow.commit()
    with SqlAgentUnitOfWork(sessions) as uow:
        assert uow.fleet.mig_layouts() == {
            "mig-a": {0: ((0, "7g.80gb", False),), 1: ()}
        }  # mig-b has not said
        assert uow.fleet.mig_layouts_revision() != before
        unchanged = uow.fleet.mig_layouts_revision()
        assert uow.agents.set_mig_layouts("mig-a", {0: [(0, "7g.80gb", False)], 1: []}) is False
        assert uow.fleet.mig_layouts_revision() == unchanged


ONE_A100 = (Path(__file__).resolve().parents[1] / "fleets" / "one_a100_mig.toml").read_text()  # mig-only


def test_a_new_leader_lays_a_mig_gpu_out_as_its_host_last_reported(store) -> None:
    """The report is in the database, not in a leader's memory: a leader started after it places a
    1g.10gb on the host's 1g at slot 0, not on the declared one at slot 6."""
    engine, factory = store
    with factory() as uow:
        uow.tenants.add(Tenant("ten_a", "a", "tenant", T0))
        uow.fleet.put(ONE_A100, ["mig-only"], T0)
        spec = RentalSpec(gpu_model="A100-80GB", mig_profile="1g.10gb")
        uow.rentals.add(Rental("rnt_1g", "ten_a", "pending", spec, T0, fingerprint="f"))
        uow.commit()
    with SqlAgentUnitOfWork(session_factory(engine)) as uow:
        uow.agents.put_node("mig-only", "digest", {"gpus": []}, T0)
        uow.agents.set_mig_layouts("mig-only", {0: [(0, "1g.10gb", False), (4, "3g.40gb", False)]})
        uow.commit()
    leader = Scheduler(
        factory, SettableClock(), CATALOG, FleetCache(CATALOG), "suanli", 0, queue=PLATFORM_QUEUE
    )
    assert leader.run_cycle().placed == 1
    with factory() as uow:
        ((allocation,),) = uow.rentals.live_allocations().values()
    assert [(s.mig_profile, s.mig_start) for s in allocation.slices] == [("1g.10gb", 0)]
