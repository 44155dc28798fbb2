"""Which executor an agent runs its workloads with: `suanli agent --executor process|container|auto`.

`process` runs them as host processes (an image rental fails there, saying so); `container` through docker or
podman (`--runtime`, else whichever is found first), and fails to start without one; `auto` is `container`
when a runtime is found, else `process`.

Host processes of a root agent run, by default, each rental as a uid of its own from `DEFAULT_UIDS` (as
`--run-as-uids` does), so that no tenant's workload runs as root, reads the node key or reaches another's
processes. The default steps back, with a warning naming why, where it cannot hold: a work directory other
users cannot pass through, or a range that holds an account of the host. `--run-as-uids none` keeps
workloads as the agent's own user; a non-root agent can only run them as itself.
"""

from __future__ import annotations

import logging
import os
from enum import StrEnum
from pathlib import Path

from suanli.agent.containers import RUNTIMES, ContainerExecutor, find_runtime
from suanli.agent.executors import Executor, ExecutorError, ProcessExecutor, RunAs, check_reachable
from suanli.agent.uids import UidPool


class ExecutorKind(StrEnum):
    PROCESS = "process"
    CONTAINER = "container"
    AUTO = "auto"


DEFAULT_UIDS = "2000000000-2000009999"  # clear of systemd's dynamic, container and foreign ranges
NO_UIDS = "none"  # `--run-as-uids none`: host processes as the agent's own user
log = logging.getLogger(__name__)


def _default_uids(base: Path) -> UidPool | None:
    """`DEFAULT_UIDS` for a root agent whose work directory other uids can reach, else None (logged)."""
    if os.geteuid() != 0:
        return None
    try:
        check_reachable(base, "a uid per rental")
        return UidPool.parse(DEFAULT_UIDS)
    except ExecutorError as error:
        log.warning("workloads run as root, the agent's user: %s", error)
        return None


def choose_executor(
    kind: ExecutorKind,
    base: Path,
    runtime: str | None = None,
    run_as: str | None = None,
    run_as_uids: str | None = None,
) -> Executor:
    """The executor of `kind` under `base`; ExecutorError for a runtime that is not one we drive, one asked
    for with the process executor, a container executor with no runtime on PATH, or a `run_as` user (or
    `run_as_uids` range, `uids.UidPool`) that is unknown, asked of a non-root agent, asked with both, or with
    `--executor container` (containers do not run on the host as a user; under `auto` it applies when host
    processes are chosen)."""
    if runtime is not None and runtime not in RUNTIMES:
        raise ExecutorError(f"--runtime {runtime!r}: use {' or '.join(RUNTIMES)}")
    for option, value in (("--run-as", run_as), ("--run-as-uids", run_as_uids)):
        if value is not None and kind is ExecutorKind.CONTAINER:
            raise ExecutorError(f"{option} is for --executor process or auto, not container")
    if run_as is not None and run_as_uids is not None:
        raise ExecutorError("give --run-as or --run-as-uids, not both")
    user = None if run_as is None else RunAs.of(run_as)
    uids = None if run_as_uids in (None, NO_UIDS) else UidPool.parse(run_as_uids)
    default = run_as is None and run_as_uids is None  # a root agent isolates rentals unless told otherwise
    if kind is ExecutorKind.PROCESS:
        if runtime is not None:
            raise ExecutorError("--runtime is for --executor container or auto, not process")
        return ProcessExecutor(base, run_as=user, uids=_default_uids(base) if default else uids)
    names = (runtime,) if runtime is not None else RUNTIMES
    found = find_runtime(names)
    if found is None:
        if kind is ExecutorKind.AUTO:
            return ProcessExecutor(base, run_as=user, uids=_default_uids(base) if default else uids)
        raise ExecutorError(f"--executor container: no {' or '.join(names)} on PATH")
    return ContainerExecutor(base, runtime=found)


def describe(executor: Executor) -> str:
    """What an executor runs workloads with, for the agent's log: `host processes` or the runtime's path."""
    if isinstance(executor, ContainerExecutor):
        return f"containers through {executor.runtime} (default image {executor.default_image})"
    if isinstance(executor, ProcessExecutor) and executor.run_as is not None:
        return f"host processes as user {executor.run_as.name}"
    if isinstance(executor, ProcessExecutor) and executor.uids is not None:
        names = (
            f"named by {executor.nss_wrapper}"
            if executor.nss_wrapper is not None
            else "with no user name: install libnss-wrapper to give them one"
        )
        return f"host processes, each rental as a uid of its own from {executor.uids.label} ({names})"
    if os.geteuid() == 0:
        return "host processes as root, the agent's user (they can read its node key; see --run-as-uids)"
    return "host processes (as the agent's user: they can read its node key; see --run-as-uids)"
