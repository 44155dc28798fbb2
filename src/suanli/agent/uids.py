"""A uid of its own for each rental's workload (`suanli agent --run-as-uids FIRST-LAST`).

With one `--run-as` user, every tenant's workload on a host runs as the same uid, and a process may signal,
trace and read the environment (`/proc/<pid>/environ`) of any other process of its uid: one tenant's
workload could read another's secrets or kill it. With a range, each rental gets a uid of its own, as
systemd's DynamicUser does: numeric, with no account behind it (the range must hold no user of the host),
the same number as its group and no supplementary groups. A uid is free when no rental directory here
belongs to it and no process runs as it (a daemon a workload left behind keeps its uid from being handed
on); a rental started again (a resize, a restart) keeps the uid its working directory already has.
"""

from __future__ import annotations

import os
import pwd
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from suanli.agent.executors import ExecutorError, RentalPaths, RunAs

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class UidPool:
    """The uids `first`..`last` (inclusive) that workloads run as, one per rental."""

    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> UidPool:
        """`FIRST-LAST` as a pool; ExecutorError naming `--run-as-uids` when it is malformed, below 1000
        (system accounts), holds a user of this host, or this agent is not root (only root starts a process
        as another uid)."""
        first_text, dash, last_text = text.strip().partition("-")
        try:
            first, last = int(first_text), int(last_text)
        except ValueError:
            raise ExecutorError(f"--run-as-uids {text!r}: give FIRST-LAST, e.g. 61000-61999") from None
        if not dash or not 1000 <= first <= last < 2**31 - 1:
            raise ExecutorError(
                f"--run-as-uids {text!r}: give FIRST-LAST with 1000 <= FIRST <= LAST, e.g. 61000-61999"
            )
        users = sorted(e.pw_name for e in pwd.getpwall() if first <= e.pw_uid <= last)
        if users:
            raise ExecutorError(
                f"--run-as-uids {text}: holds users of this host ({', '.join(users[:3])}); "
                "pick a range no account uses"
            )
        if os.geteuid() != 0:
            raise ExecutorError(
                f"--run-as-uids {text}: the agent must run as root to start workloads as other uids"
            )
        return cls(first, last)

    @property
    def label(self) -> str:
        return f"{self.first}-{self.last}"

    def holds(self, uid: int) -> bool:
        return self.first <= uid <= self.last

    def pick(self, paths: RentalPaths, rentals_dir: Path) -> RunAs:
        """The uid for the rental at `paths`: the one its working directory has, if in range, else the lowest
        free one; ExecutorError when every uid of the pool is taken."""
        with_dir = _owner(paths.workdir)
        if with_dir is not None and self.first <= with_dir <= self.last:
            return _user(with_dir)
        taken = {uid for uid in _directory_owners(rentals_dir) if uid is not None}
        taken.update(running_uids())
        for uid in range(self.first, self.last + 1):
            if uid not in taken:
                return _user(uid)
        raise ExecutorError(
            f"every uid of --run-as-uids {self.first}-{self.last} is in use; give the agent a wider range"
        )


def _user(uid: int) -> RunAs:
    return RunAs(f"uid {uid}", uid, uid, account=False)


def _owner(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


def _directory_owners(rentals_dir: Path) -> Iterable[int | None]:
    if rentals_dir.is_dir():
        for root in rentals_dir.iterdir():
            yield _owner(RentalPaths(root).workdir)


def kill_processes_of(uid: int) -> int:
    """SIGKILL every process running with `uid` (a rental's own, from the pool: nothing else runs as it),
    such as a daemon its workload left behind in a session of its own, out of its process group; how many."""
    killed = 0
    for entry in PROC.glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in entry.read_text().splitlines() if ":" in line)
            alive = fields.get("State", "").split()[:1] != ["Z"]  # a zombie runs nothing: its parent reaps it
            if alive and uid in {int(u) for u in fields["Uid"].split()}:
                os.kill(int(entry.parent.name), signal.SIGKILL)
                killed += 1
        except (OSError, ValueError, KeyError):  # it ended meanwhile
            continue
    return killed


def running_uids() -> set[int]:
    """Every uid a live process on this host runs with (from /proc; a zombie runs nothing)."""
    uids = set()
    for entry in PROC.glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in entry.read_text().splitlines() if ":" in line)
            if fields.get("State", "").split()[:1] != ["Z"]:  # real, effective, saved and filesystem uids
                uids.update(int(uid) for uid in fields["Uid"].split())
        except (OSError, ValueError, KeyError):
            continue
    return uids
