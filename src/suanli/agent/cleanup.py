"""Remove the directories of rentals that ended here: their scratch files, logs and records.

A rental's directory (`executors.RentalPaths`) holds what its workload wrote, which may be another tenant's
data for the next workload on the host to find, and it grows the disk with every rental. A GPU cloud wipes
an instance's local disk when it ends; the agent does the same once a rental is over here: the server no
longer assigns it, its log is shipped to the end, and no process of its group is alive. Results meant to
outlive a rental go elsewhere (object storage, a network volume).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from collections.abc import Collection
from pathlib import Path

from suanli.agent.executors import RentalPaths, group_alive
from suanli.agent.uids import UidPool, kill_processes_of, path_owner


def remove_rental_dir(root: Path) -> bool:
    """Delete one rental's directory, even parts its workload made unreadable to us; False when some of it
    could not be removed."""
    if not root.exists():
        return True
    _make_removable(root)
    for directory, subdirectories, _ in os.walk(root):  # top-down: each one opened after its mode is fixed
        for name in subdirectories:
            _make_removable(Path(directory) / name)
    shutil.rmtree(root, ignore_errors=True)
    return not root.exists()


def _make_removable(directory: Path) -> None:
    """Let the owner list, enter and change `directory` (a workload may have set its mode to 0)."""
    with contextlib.suppress(OSError):
        if not directory.is_symlink():
            directory.chmod(directory.stat().st_mode | stat.S_IRWXU)


def sweep_rentals(
    rentals_dir: Path, keep: Collection[str], uids: UidPool | None = None
) -> tuple[list[str], list[str]]:
    """Remove every rental's directory under `rentals_dir` but those in `keep` (assigned here, tracked, or
    left running by an earlier agent) and those whose recorded process group is alive; the ids removed, and
    those that could not be (wholly) removed. With `uids` (the agent's uid pool), what still runs as an
    ended rental's own uid is killed first, when the uid's host-wide lease is that rental's (never another
    agent's rental's): a daemon its workload started in a session of its own ran on past the rental's stop,
    on GPUs let to the next tenant; the lease is released with the directory."""
    removed: list[str] = []
    failed: list[str] = []
    if not rentals_dir.is_dir():
        return removed, failed
    for root in sorted(rentals_dir.iterdir()):
        if root.name in keep or not root.is_dir() or root.is_symlink():
            continue
        if _group_alive(RentalPaths(root).record_file):
            continue
        uid = path_owner(RentalPaths(root).workdir)
        if uid is not None and uids is not None and uids.leased_to(uid, root) and kill_processes_of(uid):
            continue  # removed at the next sweep, once the kernel has reaped them
        gone = remove_rental_dir(root)
        if gone and uid is not None and uids is not None and uids.holds(uid):
            uids.release(uid, root)
        (removed if gone else failed).append(root.name)
    return removed, failed


def _group_alive(record: Path) -> bool:
    """Whether the process group a workload record names still has a live process (unreadable: assume so)."""
    try:
        data = json.loads(record.read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    try:
        pgid = int(data["pgid"])
    except (KeyError, TypeError, ValueError):
        return True
    return pgid > 0 and pgid != os.getpgrp() and group_alive(pgid)
