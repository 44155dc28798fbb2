"""The simulator's elastic jobs (`sim --elastic`): each runs at the share of its GPUs it holds of its full
speed and is resized while it runs (grown toward its size, trimmed at a preemption's deadline), each resize
costing it a restart when `--resize-restart-s` says so. Per running job this keeps the work it has left, so
that its end, its declared end as the scheduler sees it, and the GPU-time it loses are exact."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from suanli.domain.elastic_start import full_gpus, least_size
from suanli.domain.plan import Placement
from suanli.domain.request import Request
from suanli.domain.running import Running


def as_elastic(request: Request, share: float) -> Request:
    """`request` as an elastic job that may start on `share` of its GPUs (one whole GPU or more)."""
    gpus = full_gpus(request)
    if gpus <= 1:
        return request
    return replace(request, min_gpus=max(1, math.ceil(share * gpus - 1e-9)))


def elastic_run(
    request: Request,
    placement: Placement,
    now: float,
    declared_left_s: float | None,
    *,
    borrowed: bool = False,
    run_began_s: float | None = None,
) -> Running:
    """A running elastic job as the scheduler sees it: what is left of its declared duration (given for its
    full size) stretched by how much slower than full speed it runs now; `run_began_s`: when its run began,
    if before now (a resize), from which a preemption counts what it loses, as the server counts it."""
    speed = placement.gpus / max(full_gpus(request), placement.gpus, 1e-9)
    least = least_size(request)
    if declared_left_s is not None:
        request = replace(request, max_duration_s=max(declared_left_s, 60.0) / speed)
    return Running(request, placement, now, borrowed=borrowed, least=least, run_began_s=run_began_s)


@dataclass
class ElasticJobs:
    """The running elastic jobs' work, per job: full-speed seconds still to run as of its last start or
    resize (`Running.started_at_s`), its work left and the moment its current run began, and the
    GPU-seconds it held before its last resize. With `restart_s`, each resize restarts its workload on the
    new GPUs, which then hold it that long without progress (an elastic launcher resuming from its
    checkpoint): per job, when its current run's restart ends, and the GPU-seconds restarts already counted
    as lost."""

    restart_s: float = 0.0
    work_left_s: dict[str, float] = field(default_factory=dict)
    run_left_s: dict[str, float] = field(default_factory=dict)
    run_began_s: dict[str, float] = field(default_factory=dict)
    held_gpu_s: dict[str, float] = field(default_factory=dict)
    restart_until: dict[str, float] = field(default_factory=dict)
    restarts_counted: dict[str, float] = field(default_factory=dict)

    def start(
        self, request: Request, placement: Placement, now: float, left_s: float, *, borrowed: bool = False
    ) -> tuple[Running, float]:
        """`request` starts now on `placement` with `left_s` of full-speed work: as the scheduler sees it,
        and when it ends at the speed its GPUs give it."""
        self.work_left_s[request.id] = self.run_left_s[request.id] = left_s
        self.run_began_s[request.id] = now
        run = elastic_run(request, placement, now, request.max_duration_s, borrowed=borrowed)
        return run, now + left_s / (placement.gpus / max(full_gpus(request), placement.gpus, 1e-9))

    def resize(
        self, job: Running, placement: Placement, full: Request, now: float, true_s: float
    ) -> tuple[Running, float, float]:
        """`job` (of `full`, whose true duration is `true_s`) moved onto `placement` (grown or trimmed) now,
        the work it did at its old speed counted: its new run, when that ends at its new speed (after a
        restart), and the GPU-seconds its old run spent restarting (lost)."""
        self.work_left_s[full.id] -= max(now - self._productive_from(job), 0.0) * job.gpus / full_gpus(full)
        self.held_gpu_s[full.id] = self.held_gpu_s.get(full.id, 0.0) + job.gpus * (now - job.started_at_s)
        wasted = self._wasted(job, now)
        self.restarts_counted[full.id] = self.restarts_counted.get(full.id, 0.0) + wasted
        declared = full.max_duration_s
        declared_left = None if declared is None else declared - (true_s - self.work_left_s[full.id])
        speed = placement.gpus / full_gpus(full)
        if declared_left is not None:  # the scheduler sees the restart too
            declared_left += self.restart_s * speed
        began = self.run_began_s[full.id]
        run = elastic_run(full, placement, now, declared_left, borrowed=job.borrowed, run_began_s=began)
        if self.restart_s > 0:
            self.restart_until[full.id] = now + self.restart_s
        return run, now + self.restart_s + self.work_left_s[full.id] / speed, wasted

    def end(self, job: Running, now: float) -> tuple[float, float]:
        """`job` did its work: the GPU-seconds its last resize's restart wasted, and how long its run took."""
        request_id = job.request.id
        wasted, ran_s = self._wasted(job, now), now - self.run_began_s[request_id]
        self._forget(request_id)
        return wasted, ran_s

    def preempted(self, job: Running, now: float) -> tuple[float, float]:
        """`job` was preempted now and loses its run: the GPU-seconds lost (less restarts already counted),
        and how long its run took."""
        request_id = job.request.id
        ran_s = now - self.run_began_s[request_id]
        held = self.held_gpu_s.get(request_id, 0.0) + job.gpus * (now - job.started_at_s)
        counted = self._forget(request_id)
        return held - counted, ran_s

    def saved(self, job: Running, full: Request, now: float, overhead_s: float) -> tuple[float, float, float]:
        """`job` (of `full`) was preempted now and saves its work at its notice deadline: the full-speed
        seconds of work this run did (less its own restart from a checkpoint, `overhead_s`), the GPU-seconds
        lost (less restarts already counted), and how long its run took."""
        request_id = job.request.id
        progress_s = max(now - self._productive_from(job), 0.0)
        work_now = self.work_left_s[request_id] - progress_s * job.gpus / full_gpus(full)
        saved = max(self.run_left_s[request_id] - work_now - overhead_s, 0.0)
        held = self.held_gpu_s.get(request_id, 0.0) + job.gpus * (now - job.started_at_s)
        ran_s = now - self.run_began_s[request_id]
        counted = self._forget(request_id)
        return saved, max(held - saved * full_gpus(full) - counted, 0.0), ran_s

    def _productive_from(self, job: Running) -> float:
        """When the current run of `job` began to make progress."""
        return max(job.started_at_s, self.restart_until.get(job.request.id, job.started_at_s))

    def _wasted(self, job: Running, now: float) -> float:
        """The GPU-seconds the current run of `job` spent restarting, up to `now`."""
        restarting_s = min(self.restart_until.get(job.request.id, job.started_at_s), now) - job.started_at_s
        return job.gpus * max(restarting_s, 0.0)

    def _forget(self, request_id: str) -> float:
        """The job's run ended: its records go, with the restart GPU-seconds already counted as lost (so the
        caller does not count them again)."""
        for record in (
            self.work_left_s,
            self.run_left_s,
            self.run_began_s,
            self.held_gpu_s,
            self.restart_until,
        ):
            record.pop(request_id, None)
        return self.restarts_counted.pop(request_id, 0.0)
