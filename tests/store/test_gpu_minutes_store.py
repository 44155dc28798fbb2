"""GPU readings by minute (SQLite and PostgreSQL): a heartbeat's samples fold into their minute's row (means
of what was read, the most memory), a GPU or minute of its own stays apart, and rows past the retention are
dropped at the first beat of an hour."""

from __future__ import annotations

from datetime import timedelta

from conftest import T0
from suanli.app.gpu_history import RETENTION, GpuMinute, GpuSample, record
from suanli.store.agent_repositories import SqlAgentUnitOfWork
from suanli.store.db import session_factory


def test_samples_fold_by_gpu_and_minute_and_old_minutes_are_dropped(store) -> None:
    engine, _ = store
    sessions = session_factory(engine)
    minute = T0 + timedelta(minutes=5)
    with SqlAgentUnitOfWork(sessions) as uow:
        uow.gpu_minutes.add("n1", minute, [GpuSample(0, 40.0, None, 100.0), GpuSample(1, 5.0, 10, None)])
        uow.gpu_minutes.add("n1", minute, [GpuSample(0, 60.0, 2048, None)])
        uow.gpu_minutes.add("n1", minute, [GpuSample(0, None, 1024, 300.0)])  # memory lower than the most
        uow.gpu_minutes.add("n2", minute, [GpuSample(0, 99.0, 1, 1.0)])
        uow.gpu_minutes.add("n1", minute - RETENTION - timedelta(minutes=1), [GpuSample(0, 1.0, 1, 1.0)])
        uow.commit()
    with SqlAgentUnitOfWork(sessions) as uow:
        read = uow.gpu_minutes.read("n1", [0, 1], T0 - RETENTION * 2, minute)
        assert read[-2:] == [GpuMinute(0, minute, 50.0, 2048, 200.0), GpuMinute(1, minute, 5.0, 10, None)]
        assert len(read) == 3  # and the old one, until it is pruned
        later = minute + timedelta(hours=1)
        record(uow.gpu_minutes, "n1", minute, later.replace(minute=0), [{"index": 0, "utilization_pct": 7}])
        uow.commit()
    with SqlAgentUnitOfWork(sessions) as uow:
        read = uow.gpu_minutes.read("n1", [0], T0 - RETENTION * 2, later)
        assert [(m.minute, m.utilization_pct) for m in read] == [
            (minute, 50.0),
            (later.replace(minute=0), 7.0),
        ]
        assert uow.gpu_minutes.read("n2", [0], T0, minute)[0].utilization_pct == 99.0
