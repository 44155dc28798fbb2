"""The MIG layouts agents report, stored per node (SQLite and PostgreSQL): a report that changes nothing is
no change, and the scheduler's read gives each reported node's GPUs back as reported."""

from __future__ import annotations

from conftest import T0
from suanli.store.agent_repositories import SqlAgentUnitOfWork
from suanli.store.db import session_factory


def test_a_reported_layout_is_kept_per_node_and_only_a_different_one_is_a_change(store) -> None:
    engine, _ = store
    sessions = session_factory(engine)
    with SqlAgentUnitOfWork(sessions) as uow:
        for node in ("mig-a", "mig-b"):
            uow.agents.put_node(node, f"digest-{node}", {"gpus": []}, T0)
        carved = {0: [(6, "1g.10gb"), (0, "4g.40gb")], 1: []}
        assert uow.agents.set_mig_layouts("mig-a", carved) is True
        assert uow.agents.set_mig_layouts("mig-a", {1: [], 0: [(0, "4g.40gb"), (6, "1g.10gb")]}) is False
        uow.commit()
    with SqlAgentUnitOfWork(sessions) as uow:
        assert uow.fleet.mig_layouts() == {"mig-a": {0: ((0, "4g.40gb"), (6, "1g.10gb")), 1: ()}}
        before = uow.fleet.mig_layouts_revision()
        assert uow.agents.set_mig_layouts("mig-a", {0: [(0, "7g.80gb")], 1: []}) is True
        uow.commit()
    with SqlAgentUnitOfWork(sessions) as uow:
        assert uow.fleet.mig_layouts() == {"mig-a": {0: ((0, "7g.80gb"),), 1: ()}}  # mig-b has not said
        assert uow.fleet.mig_layouts_revision() != before
        unchanged = uow.fleet.mig_layouts_revision()
        assert uow.agents.set_mig_layouts("mig-a", {0: [(0, "7g.80gb")], 1: []}) is False
        assert uow.fleet.mig_layouts_revision() == unchanged
