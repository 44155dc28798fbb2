"""What the agent tracks of one rental's workload on this host, from its assignment to its reported end."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from suanli.agent.assignment import Assignment
from suanli.agent.executors import Workload
from suanli.agent.restart import RestartTracker


@dataclass
class Local:
    """One rental's workload on this host, as the agent tracks it."""

    rental_id: str
    workload: Workload | None
    tracker: RestartTracker
    assignment: Assignment | None
    log_file: Path | None
    state: str = "running"  # running, succeeded, failed, stopped
    exit_code: int | None = None
    message: str = ""
    stop_requested: bool = False
    noticed_until: datetime | None = None
    trim_noticed: datetime | None = None  # the deadline of a trim's notice written (no kill at it)
    log_offset: int = 0
    log_behind: bool = False  # the last shipping stopped at the per-step cap: more of the log waits
    partial_since: float | None = None  # monotonic time its log's unfinished last line was first held back
    unassigned: bool = False  # killed as no longer assigned here; reported once, then forgotten
    stale_record: Path | None = None  # the record of a run that ended with no agent here, till reported
    attempt: int = 0  # the server's count of restarts on all the rental's nodes that this run follows
    launched_at: float | None = None  # monotonic time this agent started the workload (None: adopted)
    exited_at: float | None = None  # monotonic time this agent first saw it ended (None: it runs)
    restarted_here: int = 0  # restarts this agent made by itself after failures (one node, on-failure)
    failed_exit_code: int | None = None  # the exit code the last of them followed
    placement: int = 0  # the server's count of the rental's placements this run follows
    # bytes of this node's log the server held before this log file's first byte (an earlier placement's
    # output, its file since removed); None: not asked yet (`ship_log` asks before its first upload)
    log_base: int | None = 0
