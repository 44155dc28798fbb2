"""From an assignment to a launchable workload spec: the isolation env, the devices and the rental's paths."""

from __future__ import annotations

from suanli.agent.assignment import Assignment
from suanli.agent.executors import Executor, WorkloadSpec
from suanli.agent.isolation import visible_devices, workload_env
from suanli.agent.probe import HostInventory


def workload_spec(assignment: Assignment, inventory: HostInventory, executor: Executor) -> WorkloadSpec:
    """The spec to `executor.launch`; IsolationError when the rental cannot be isolated as assigned."""
    paths = executor.paths(assignment.rental_id)
    env = workload_env(
        assignment, inventory, notice_file=str(paths.notice_file), nodes_file=str(paths.nodes_file)
    )
    return WorkloadSpec(
        rental_id=assignment.rental_id,
        command=assignment.command,
        env=env,
        devices=visible_devices(assignment.slices, inventory),
        image=assignment.image,
    )
