"""Loaders for the public cluster traces: Alibaba 2023 "openb" nodes and pods, Microsoft ITP jobs."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from suanli.domain.errors import FleetError, RequestError
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.request import GpuSelector, GpuShare, Request, WholeGpus

TRACE_REGION = Region("openb", jurisdiction="CN", grid_gco2_per_kwh=581.0, pue=1.3)
NODES_PER_LEAF = 32
LEAVES_PER_POD = 4


@dataclass(frozen=True, slots=True)
class TracePod:
    """One row of the openb pod list: its request and its life in the trace (seconds from the start)."""

    request: Request
    creation_s: float
    deletion_s: float | None
    scheduled_s: float | None


def read_openb_nodes(path: Path) -> Fleet:
    """The trace's GPU nodes as a fleet: one region, a leaf per 32 nodes, GPUs shareable; its CPU-only nodes
    (in the all-node file) are left out, as the fleet model has GPU nodes only."""
    nodes = []
    for line, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        gpu_count = _int(row, "gpu", path, line)
        if gpu_count <= 0:
            continue
        nodes.append(
            Node(
                name=row["sn"],
                region=TRACE_REGION.name,
                topology=synthetic_topology(TRACE_REGION.name, len(nodes)),
                cpu_milli=_int(row, "cpu_milli", path, line),
                memory_mib=_int(row, "memory_mib", path, line),
                gpu_model=row["model"],
                gpu_count=gpu_count,
                gpu_mode=GpuMode.SHARED,
            )
        )
    if not nodes:
        raise FleetError("no node with a GPU", source=str(path))
    return Fleet({TRACE_REGION.name: TRACE_REGION}, tuple(nodes))


def synthetic_topology(region: str, index: int) -> tuple[str, str, str, str]:
    """A network path for a trace node that has none: 32 nodes a leaf, 4 leaves a pod, one zone."""
    leaf = index // NODES_PER_LEAF
    return (region, "z1", f"pod-{leaf // LEAVES_PER_POD:03d}", f"leaf-{leaf:04d}")


POD_TIMES = ("creation_time", "scheduled_time", "deletion_time")  # what a replay in time needs of each pod


def read_openb_pods(path: Path, *, with_memory: bool = False, timed: bool = False) -> list[TracePod]:
    """The trace's pods as requests; host memory is kept only `with_memory`; `timed`: the file must have the
    columns of each pod's times (`POD_TIMES`), which a replay in time reads."""
    pods = []
    required = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec") + (
        POD_TIMES if timed else ()
    )
    for line, row in _rows(path, required):
        num_gpu = _int(row, "num_gpu", path, line)
        gpu_milli = _int(row, "gpu_milli", path, line)
        try:
            shape = GpuShare(gpu_milli) if num_gpu == 1 and 0 < gpu_milli < 1000 else WholeGpus(num_gpu)
            spec = frozenset(m for m in (row.get("gpu_spec") or "").split("|") if m)
            request = Request(
                id=row["name"],
                shape=shape,
                selector=GpuSelector(models=spec),
                cpu_milli=_int(row, "cpu_milli", path, line),
                memory_mib=_int(row, "memory_mib", path, line) if with_memory else 0,
                submitted_at_s=_float(row, "creation_time", path, line) or 0.0,
            )
        except RequestError as error:
            raise FleetError(str(error), source=f"{path}:{line}", field=error.field) from None
        pod = TracePod(
            request,
            _float(row, "creation_time", path, line) or 0.0,
            _float(row, "deletion_time", path, line),
            _float(row, "scheduled_time", path, line),
        )
        if timed and (problem := _times_problem(pod)) is not None:
            raise FleetError(problem, source=f"{path}:{line}", field="deletion_time")
        pods.append(pod)
    return pods


def _times_problem(pod: TracePod) -> str | None:
    """Why `pod`'s times cannot be replayed (its run is from scheduled to deleted), or None."""
    times = (pod.creation_s, pod.scheduled_s, pod.deletion_s)
    if any(t is not None and (t < 0 or not math.isfinite(t)) for t in times):
        return "a time is negative or not finite"
    if pod.scheduled_s is None:
        return None  # never scheduled: left out of the replay
    if pod.deletion_s is None:
        return "scheduled but never deleted: how long it ran is unknown"
    if pod.deletion_s < pod.scheduled_s:
        return "deleted before it was scheduled"
    if pod.scheduled_s < pod.creation_s:
        return "scheduled before it was created"
    return None


def _rows(path: Path, required: tuple[str, ...]):
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as error:
        raise FleetError(f"cannot read: {error.strerror}", source=str(path)) from None
    with handle:
        try:
            reader = csv.DictReader(handle)
            missing = [c for c in required if c not in (reader.fieldnames or ())]
            if missing:
                raise FleetError(f"missing columns {', '.join(missing)}", source=str(path))
            yield from enumerate(reader, start=2)
        except UnicodeDecodeError:
            raise FleetError("not a text (UTF-8) CSV file", source=str(path)) from None


def _int(row: dict, column: str, path: Path, line: int) -> int:
    try:
        return int(row[column])
    except (TypeError, ValueError):
        raise FleetError(f"not an integer: {row[column]!r}", source=f"{path}:{line}", field=column) from None


def _float(row: dict, column: str, path: Path, line: int) -> float | None:
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise FleetError(f"not a number: {text!r}", source=f"{path}:{line}", field=column) from None
    if not math.isfinite(value):
        raise FleetError(f"not a finite number: {text!r}", source=f"{path}:{line}", field=column)
    return value
