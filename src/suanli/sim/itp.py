"""Microsoft ITP job traces (ElasticFlow): load, shape into requests, size a fleet for an offered load.

Columns `job_id, submission_time, duration, num_gpu` (seconds; the files end without a newline). A job of k
GPUs on nodes of M GPUs is one node of k GPUs when k <= M, else a gang of n = ceil(k / M) nodes with
ceil(k / n) GPUs each (k = 12 on 8-GPU nodes: 2 x 6); when k is a multiple of M that is n x M exactly.
Declared durations (what a user writes as a time limit) are derived from the true ones by a stated rule.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import math
import random
from dataclasses import dataclass
from pathlib import Path

from suanli.domain.errors import FleetError
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.sim.traces import synthetic_topology

SIM_REGION = Region("sim", jurisdiction="US", grid_gco2_per_kwh=400.0, pue=1.2)
SIM_MODEL = "H100-SXM-80GB"
HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submitted_s: float
    duration_s: float
    gpus: int


def read_itp_jobs(path: Path) -> list[TraceJob]:
    """The trace's jobs in file order (sorted by submission); FleetError naming the line on a bad row."""
    try:
        return _read_itp_jobs(path)
    except UnicodeDecodeError:
        raise FleetError("not a text (UTF-8) CSV file", source=str(path)) from None


def _read_itp_jobs(path: Path) -> list[TraceJob]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as error:
        raise FleetError(f"cannot read: {error.strerror}", source=str(path)) from None
    jobs = []
    with handle:
        reader = csv.DictReader(handle)
        missing = {"job_id", "submission_time", "duration", "num_gpu"} - set(reader.fieldnames or ())
        if missing:
            raise FleetError(f"missing columns {', '.join(sorted(missing))}", source=str(path))
        for line, row in enumerate(reader, start=2):
            try:
                job = TraceJob(
                    row["job_id"], float(row["submission_time"]), float(row["duration"]), int(row["num_gpu"])
                )
            except (TypeError, ValueError):
                raise FleetError("not a number", source=f"{path}:{line}") from None
            if not (math.isfinite(job.submitted_s) and math.isfinite(job.duration_s)):
                raise FleetError("submission_time and duration must be finite", source=f"{path}:{line}")
            if job.gpus < 1 or job.duration_s < 0:
                raise FleetError("num_gpu must be >= 1 and duration >= 0", source=f"{path}:{line}")
            jobs.append(job)
    return jobs


def jittered(jobs: list[TraceJob], max_shift_s: float, seed: int) -> list[TraceJob]:
    """`jobs` with each submission moved by a seeded uniform shift in [-max_shift_s, max_shift_s] (never
    before 0), in submission order: the same workload, to tell a policy's effect from run-to-run chaos."""
    rng = random.Random(seed)
    shifts = [rng.uniform(-max_shift_s, max_shift_s) for _ in jobs]
    moved = [
        TraceJob(j.job_id, max(0.0, j.submitted_s + shift), j.duration_s, j.gpus)
        for j, shift in zip(jobs, shifts, strict=True)
    ]
    return sorted(moved, key=lambda j: j.submitted_s)


def split_jobs(jobs: list[TraceJob], parts: int) -> list[list[TraceJob]]:
    """`jobs` dealt into `parts` disjoint traces by a hash of each job's id (stable across runs and machines):
    each part keeps the trace's arrival pattern, sizes and durations, thinned; clusters of the same kind."""
    if parts < 1:
        raise ValueError(f"a trace splits into at least 1 part (got {parts})")
    split: list[list[TraceJob]] = [[] for _ in range(parts)]
    for job in jobs:
        digest = hashlib.sha256(job.job_id.encode("utf-8")).digest()
        split[int.from_bytes(digest[:8], "big") % parts].append(job)
    return split


def gang_shape(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(GPUs per node, nodes) for a job of `gpus` GPUs on nodes of `gpus_per_node` (see the module doc)."""
    if gpus <= gpus_per_node:
        return gpus, 1
    nodes = math.ceil(gpus / gpus_per_node)
    return math.ceil(gpus / nodes), nodes


def offered_load(jobs: list[TraceJob], capacity_gpus: int) -> float:
    """sum(duration x GPUs) / (arrival span x capacity): arrival span = last minus first submission."""
    if not jobs or capacity_gpus <= 0:
        return 0.0
    span = max(j.submitted_s for j in jobs) - min(j.submitted_s for j in jobs)
    work = sum(j.duration_s * j.gpus for j in jobs)
    return work / (max(span, 1.0) * capacity_gpus)


def nodes_for_load(jobs: list[TraceJob], gpus_per_node: int, target: float = 0.85) -> int:
    """The smallest node count whose offered load is at most `target`."""
    work = offered_load(jobs, 1)
    return max(1, math.ceil(work / (target * gpus_per_node)))


def synthetic_fleet(nodes: int, gpus_per_node: int, gpu_mode: GpuMode = GpuMode.WHOLE) -> Fleet:
    """N nodes of M H100-SXM-80GB GPUs (whole, or `GpuMode.SHARED`: whole GPUs and shares of one), one leaf
    per 32 nodes (four leaves a pod)."""
    fleet_nodes = tuple(
        Node(
            name=f"node-{i:05d}",
            region=SIM_REGION.name,
            topology=synthetic_topology(SIM_REGION.name, i),
            cpu_milli=16_000 * gpus_per_node,
            memory_mib=131_072 * gpus_per_node,
            gpu_model=SIM_MODEL,
            gpu_count=gpus_per_node,
            gpu_mode=gpu_mode,
        )
        for i in range(nodes)
    )
    return Fleet({SIM_REGION.name: SIM_REGION}, fleet_nodes)


ESTIMATE_KINDS = ("pow2h", "factor", "exact")


@dataclass(frozen=True, slots=True)
class DurationEstimate:
    """How a job's declared duration (its time limit) is derived from its true run time.

    `pow2h`: the true duration rounded up to a power of two hours (1 h, 2 h, 4 h, ...), as users pick round
    limits; `factor`: true x a factor drawn uniformly from [1, `max_factor`] with `seed` per job; `exact`:
    the true duration (an oracle, for reference only). A declared duration is never below the true one, so
    no job is killed at its limit.
    """

    kind: str = "pow2h"
    max_factor: float = 3.0
    seed: int = 0

    def declared(self, job: TraceJob) -> float:
        true = max(job.duration_s, 1.0)
        if self.kind == "exact":
            return true
        if self.kind == "factor":
            return true * random.Random(f"{self.seed}:{job.job_id}").uniform(1.0, self.max_factor)
        declared = HOUR_S * 2 ** max(0, math.ceil(math.log2(true / HOUR_S)))  # pow2h
        return declared if declared >= true else 2 * declared  # guard against log2 rounding down

    def __post_init__(self) -> None:
        if self.kind not in ESTIMATE_KINDS:
            raise ValueError(f"unknown duration estimate {self.kind!r}; use {', '.join(ESTIMATE_KINDS)}")
        if not 1.0 <= self.max_factor < math.inf:  # also refuses NaN
            raise ValueError(f"max_factor must be finite and >= 1 (got {self.max_factor:g})")

    def describe(self) -> str:
        return {
            "pow2h": "declared = true duration rounded up to a power of two hours (min 1 h)",
            "factor": f"declared = true duration x U[1, {self.max_factor:g}] (seed {self.seed})",
            "exact": "declared = true duration (oracle)",
        }.get(self.kind, self.kind)


def parse_estimate(text: str, seed: int = 0) -> DurationEstimate:
    """`pow2h`, `exact`, `factor` or `factor:MAX` (true x U[1, MAX], seeded) as a `DurationEstimate`;
    ValueError naming `--estimate` and the accepted forms otherwise."""
    usage = "use pow2h, exact, factor or factor:MAX (a finite MAX >= 1)"
    kind, colon, bound = text.strip().partition(":")
    if kind not in ESTIMATE_KINDS or (colon and kind != "factor"):
        raise ValueError(f"--estimate {text}: {usage}")
    if not colon:
        return DurationEstimate(kind, seed=seed)
    try:
        max_factor = float(bound)
    except ValueError:
        raise ValueError(f"--estimate {text}: MAX is not a number; {usage}") from None
    if not 1.0 <= max_factor < math.inf:
        raise ValueError(f"--estimate {text}: MAX is out of range; {usage}")
    return DurationEstimate(kind, max_factor=max_factor, seed=seed)


def synthetic_jobs(
    template: list[TraceJob],
    count: int,
    capacity_gpus: int,
    load: float = 0.85,
    seed: int = 0,
    arrivals: str = "trace",
) -> list[TraceJob]:
    """`count` ITP-like jobs offering `load` of `capacity_gpus`, built from a real trace (`template`).

    `trace` (default): the template is replayed copy after copy (job sizes, durations and the gaps between
    arrivals, so its bursts, kept) and the arrival clock is compressed by the factor that gives `load`.
    `poisson`: (GPUs, duration) pairs bootstrapped from the template with Poisson arrivals at that rate
    (smooth: almost no queue forms at 85%). Seeded and reproducible; durations are never scaled.
    """
    if not template or count < 1:
        return []
    rng = random.Random(seed)
    mean_work = sum(j.duration_s * j.gpus for j in template) / len(template)
    mean_gap_s = mean_work / (load * capacity_gpus)
    jobs: list[TraceJob] = []
    if arrivals == "poisson":
        clock = 0.0
        for number in range(count):
            pick = template[rng.randrange(len(template))]
            jobs.append(TraceJob(f"syn{number}", round(clock, 3), pick.duration_s, pick.gpus))
            clock += rng.expovariate(1.0 / mean_gap_s)
        return jobs
    if arrivals != "trace":
        raise ValueError(f"unknown arrivals {arrivals!r}; use trace or poisson")
    ordered = sorted(template, key=lambda j: j.submitted_s)
    gaps = [b.submitted_s - a.submitted_s for a, b in itertools.pairwise(ordered)]
    gaps.append(sum(gaps) / len(gaps) if gaps else 1.0)  # between one copy's last job and the next's first
    factor = mean_gap_s / (sum(gaps) / len(gaps))
    clock = 0.0
    for number in range(count):
        pick = ordered[number % len(ordered)]
        jobs.append(TraceJob(f"syn{number}", round(clock, 3), pick.duration_s, pick.gpus))
        clock += gaps[number % len(gaps)] * factor
    return jobs
