"""The host's GPUs as the agent shapes and reports them: the MIG instances a placement needs made, and for
each heartbeat the MIG layouts (probed again every `MIG_PROBE_S`) and the telemetry."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from suanli.agent.assignment import Assignment
from suanli.domain.errors import SuanliError
from suanli.wire.agent_schemas import GpuTelemetryReport, MigInstanceReport, MigLayoutReport

if TYPE_CHECKING:
    from suanli.agent.runner import AgentRunner

log = logging.getLogger(__name__)
MIG_PROBE_S = 30.0  # how often the heartbeat probes the host's MIG instances again (made by hand meanwhile)


class HostGpus:
    """Making MIG instances and reading the GPUs for the heartbeat, a part of an `AgentRunner`."""

    def _make_mig_devices(self: AgentRunner, assignment: Assignment) -> None:
        """Make the MIG instances the placement chose that this host does not have yet (the scheduler may
        place a slice where an instance must first be created: a repartition), then probe again."""
        made = False
        for piece in assignment.slices:
            if piece.mig_profile is None or piece.mig_start is None:
                continue
            gpu = self.inventory.gpu(piece.gpu_index)
            if any(
                m.profile == piece.mig_profile and m.start_slot == piece.mig_start for m in gpu.mig_devices
            ):
                continue
            held = {
                (s.mig_start, s.mig_profile)
                for other in self.local.values()
                if other.state == "running" and other.assignment is not None
                for s in other.assignment.slices
                if s.gpu_index == piece.gpu_index and s.mig_profile is not None and s.mig_start is not None
            }
            held |= {(m.start_slot, m.profile) for m in gpu.mig_devices if m.processes}  # someone's, running
            log.info(
                "%s: making MIG %s at slot %d on GPU %d",
                assignment.rental_id,
                piece.mig_profile,
                piece.mig_start,
                piece.gpu_index,
            )
            self.probe.make_mig_device(piece.gpu_index, (piece.mig_start, piece.mig_profile), held)
            made = True
        if made:
            self.inventory = self.probe.inventory()

    def _mig_layouts(self: AgentRunner) -> list[MigLayoutReport] | None:
        """The MIG instances of every GPU in MIG mode, probed again at most every `MIG_PROBE_S` (instances
        made by hand show up), for the scheduler to place slices on; busy: processes that none of this
        host's rentals was given run on it (not suanli's: never placed on, never destroyed). None on a host
        without MIG."""
        now = time.monotonic()
        if now - self.mig_probed_at >= MIG_PROBE_S:
            try:
                self.inventory = self.probe.inventory()
            except SuanliError as error:
                log.warning("MIG probe failed: %s", error)
            self.mig_probed_at = now
        ours = {
            (piece.gpu_index, piece.mig_start, piece.mig_profile)
            for local in self.local.values()
            if local.assignment is not None
            for piece in local.assignment.slices
        }
        layouts = [
            MigLayoutReport(
                index=gpu.index,
                instances=[
                    MigInstanceReport(
                        profile=m.profile,
                        start_slot=m.start_slot,
                        busy=m.processes > 0 and (gpu.index, m.start_slot, m.profile) not in ours,
                    )
                    for m in gpu.mig_devices
                ],
            )
            for gpu in self.inventory.gpus
            if gpu.mig_mode
        ]
        return layouts or None

    def _telemetry(self: AgentRunner) -> list[GpuTelemetryReport]:
        try:
            readings = self.probe.telemetry()
        except SuanliError as error:
            log.warning("telemetry failed: %s", error)
            return []
        return [
            GpuTelemetryReport(
                index=r.index,
                utilization_pct=r.utilization_pct,
                memory_used_mib=r.memory_used_mib,
                power_w=r.power_w,
            )
            for r in readings
        ]
