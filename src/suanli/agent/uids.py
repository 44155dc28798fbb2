"""A uid of its own for each rental's workload (`suanli agent --run-as-uids FIRST-LAST`).

With one `--run-as` user, every tenant's workload on a host runs as the same uid, and a process may signal,
trace and read the environment (`/proc/<pid>/environ`) of any other process of its uid: one tenant's
workload could read another's secrets or kill it. With a range, each rental gets a uid of its own, as
systemd's DynamicUser does: numeric, with no account behind it (the range must hold no user of the host),
the same number as its group and no supplementary groups. A uid is free when no rental directory here
belongs to it and no process runs as it (a daemon a workload left behind keeps its uid from being handed
on); a rental started again (a resize, a restart) keeps the uid its working directory already has.

Several agents may share a host (`suanli demo` runs one per node) and a range, so a uid is also leased
host-wide: under an exclusive lock on `leases_dir/.lock`, the picker writes `leases_dir/<uid>` naming the
rental's directory, and skips every uid whose lease names a directory that still exists (an agent's or
another's). A lease whose directory was removed (the rental ended, even under an agent that died) is free
again. Killing what runs as a rental's uid at its end (`kill_processes_of`) is for the rental that holds
the uid's lease only, so one rental's end never kills another agent's tenant's workload.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import signal
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from suanli.agent.executors import ExecutorError, RentalPaths, RunAs

PROC = Path("/proc")
HOST_LEASES_DIR = Path("/run/suanli/uid-leases")  # one per host, shared by its agents; gone at a reboot
LOCK_FILE = ".lock"


@dataclass(frozen=True, slots=True)
class UidPool:
    """The uids `first`..`last` (inclusive) that workloads run as, one per rental."""

    first: int
    last: int
    leases_dir: Path = HOST_LEASES_DIR

    @classmethod
    def parse(cls, text: str, leases_dir: Path = HOST_LEASES_DIR) -> UidPool:
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
        return cls(first, last, leases_dir)

    @property
    def label(self) -> str:
        return f"{self.first}-{self.last}"

    def holds(self, uid: int) -> bool:
        return self.first <= uid <= self.last

    def pick(self, paths: RentalPaths, rentals_dir: Path) -> RunAs:
        """The uid for the rental at `paths`: the one its working directory has, if in range, else the lowest
        free one, leased host-wide to `paths.root` (which must exist); ExecutorError when every uid of the
        pool is taken."""
        with_dir = path_owner(paths.workdir)
        if with_dir is not None and self.first <= with_dir <= self.last:
            return _user(with_dir)
        with self._leasing():
            taken = {uid for uid in _directory_owners(rentals_dir) if uid is not None}
            taken.update(running_uids())
            for uid in range(self.first, self.last + 1):
                if uid not in taken and self._lease_holder(uid) is None:
                    (self.leases_dir / str(uid)).write_text(str(paths.root.resolve()))
                    return _user(uid)
        raise ExecutorError(
            f"every uid of --run-as-uids {self.first}-{self.last} is in use; give the agent a wider range"
        )

    def leased_to(self, uid: int, root: Path) -> bool:
        """Whether `uid` is of the pool and its host-wide lease is the rental's at `root` (or it has none: a
        rental started before leases), so that what runs as it is that rental's alone."""
        if not self.holds(uid):
            return False
        holder = self._lease_holder(uid)
        return holder is None or holder == root.resolve()

    def release(self, uid: int, root: Path) -> None:
        """Drop `uid`'s lease if the rental at `root` holds it (its directory is gone: the uid is free)."""
        with self._leasing():
            lease = self.leases_dir / str(uid)
            with contextlib.suppress(OSError):
                if Path(lease.read_text()) == root.resolve():
                    lease.unlink()

    def _lease_holder(self, uid: int) -> Path | None:
        """The rental directory that holds `uid`'s lease, None when no existing directory does."""
        try:
            holder = Path((self.leases_dir / str(uid)).read_text())
        except (OSError, ValueError):
            return None
        return holder if holder.is_dir() else None

    @contextlib.contextmanager
    def _leasing(self) -> Iterator[None]:
        """Hold the host-wide lock on the leases, so that two agents cannot lease one uid at once."""
        self.leases_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(self.leases_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)


def _user(uid: int) -> RunAs:
    return RunAs(f"uid {uid}", uid, uid, account=False)


def path_owner(path: Path) -> int | None:
    """The uid `path` belongs to; None when it cannot be read (gone)."""
    try:
        return path.stat().st_uid
    except OSError:
        return None


def _directory_owners(rentals_dir: Path) -> Iterable[int | None]:
    if rentals_dir.is_dir():
        for root in rentals_dir.iterdir():
            yield path_owner(RentalPaths(root).workdir)


def kill_processes_of(uid: int) -> int:
    """SIGKILL every process running with `uid` (a rental's own, leased to it host-wide: nothing else runs
    as it; check `UidPool.leased_to` first), such as a daemon its workload left behind in a session of its
    own, out of its process group; how many."""
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
