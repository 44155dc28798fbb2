"""Measured GPU energy of rentals from agent telemetry, and the average power an invoice may use.

Rules:

* NVML reports power per physical GPU. A rental's power on a node at one heartbeat is the sum, over the
  slices it holds there, of `power_w[gpu_index] x milli / 1000` (a whole GPU is 1000 milli, a MIG instance
  or a share its milli): a slice gets its share of the GPU's power. When any of those GPUs has no power
  reading the rental is not measured at that beat (partial data would understate it).
* The interval a beat measures is the time since the node's previous heartbeat. A gap longer than
  `MAX_GAP_BEATS` x the heartbeat interval (or a clock that went backwards) measures nothing: the node was
  away, and the power now says nothing about that time. Each measured beat adds power x interval (joules)
  to the rental's run on that node, and the interval to its measured seconds.
* An invoice uses the measured average only when the runs' measured seconds cover at least `MIN_COVERAGE`
  of the rental's billable node-seconds (billable seconds x nodes); else TDP x the utilization estimate.
  The average per GPU is joules / the GPU-seconds measured (each beat's seconds x the GPUs the rental held on
  that node then, so a resize keeps it exact); x GPU-hours it gives the rental's energy over its billable
  time.
* A rental that held nodes in several regions (re-placed after a lost node, a gang across regions) is
  charged each region's PUE and grid intensity for its GPU-seconds there: `blend_regions` gives the one PUE
  and grid figure that do it exactly for the rental's total (the PUE's mean by GPU-seconds; the grid's by
  GPU-seconds x PUE, as it weighs kWh), over the rental's whole life. A rental re-placed on another GPU
  model (a gang is one model, but a re-queued rental naming none or a family may land on another) is
  charged each model's TDP for its GPU-seconds on it: `blend_models` gives the one TDP, and the regions are
  then blended by GPU-seconds x TDP, so energy and CO2 stay exact where both changed. Both are one weighted
  mean (`blend`); each allocation's GPU-seconds are its billed seconds (`held_s`: booked to released, less
  the time the rental waited in the queue) x its GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from statistics import fmean

MAX_GAP_BEATS = 3
MIN_COVERAGE = 0.5
WHOLE_GPU_MILLI = 1000


def slice_power_w(slices: Iterable[tuple[int, int]], power_w: Mapping[int, float | None]) -> float | None:
    """Power (W) of `(gpu_index, milli)` slices from per-GPU readings; None when a reading is missing."""
    total = 0.0
    found = False
    for gpu_index, milli in slices:
        reading = power_w.get(gpu_index)
        if reading is None or reading < 0:
            return None
        total += reading * milli / WHOLE_GPU_MILLI
        found = True
    return total if found else None


def measured_interval_s(gap_s: float | None, heartbeat_interval_s: float) -> float:
    """Seconds a beat measures, `gap_s` after the node's previous one; 0 when none or too long."""
    if gap_s is None or gap_s <= 0 or gap_s > MAX_GAP_BEATS * heartbeat_interval_s:
        return 0.0
    return gap_s


def average_power_per_gpu_w(
    energy_j: float, measured_s: float, measured_gpu_s: float, billable_node_s: float
) -> float | None:
    """Measured average power per GPU (W), or None when the measurement covers too little of the rental.

    All summed over the rental's runs (one per node, and one per node it was re-queued to): `energy_j`, the
    node-seconds measured (`measured_s`) and the GPU-seconds those cover (each beat's seconds x the GPUs held
    on that node then). `billable_node_s`: its billable seconds x its nodes (at each size, when resized).
    """
    if measured_s <= 0 or measured_gpu_s <= 0 or billable_node_s <= 0 or energy_j < 0:
        return None
    if measured_s < MIN_COVERAGE * billable_node_s:
        return None
    return energy_j / measured_gpu_s


def held_s(
    started_s: int, end_s: int, booked_s: int, released_s: int | None, gaps: Iterable[tuple[int, int]]
) -> int:
    """The billed seconds of one allocation of a rental: from its booking (not before the rental's start,
    `started_s`) to its release (None: still held) or `end_s`, less the `(from_s, to_s)` gaps the rental
    waited in the queue, which are not billed (`RentalUsage.gaps`); at least 0."""
    start_s = max(started_s, booked_s)
    stop_s = end_s if released_s is None else min(end_s, released_s)
    queued_s = sum(max(0, min(stop_s, to_s) - max(start_s, from_s)) for from_s, to_s in gaps)
    return max(0, stop_s - start_s - queued_s)


def blend_regions(
    held: Iterable[tuple[str, float, float, float]],
) -> tuple[tuple[str, ...], float, float] | None:
    """(region names, PUE, grid g/kWh) that give the energy and CO2 of GPU-seconds spread over regions,
    from `(name, pue, grid_gco2_per_kwh, gpu_seconds)`; names most GPU-seconds first; None without any."""
    blended = blend((name, (pue, pue * grid), gpu_s) for name, pue, grid, gpu_s in held)
    if blended is None:
        return None
    names, (pue, pue_x_grid) = blended
    return names, pue, pue_x_grid / pue  # the grid weighed by GPU-seconds x PUE, as it weighs kWh


def blend_models(held: Iterable[tuple[str, float, float]]) -> tuple[tuple[str, ...], float] | None:
    """(model names, TDP W) that give the estimated energy of GPU-seconds spread over GPU models, from
    `(name, tdp_watts, gpu_seconds)`: the TDPs' mean by GPU-seconds; names most GPU-seconds first; None
    without any."""
    blended = blend((name, (tdp_w,), gpu_s) for name, tdp_w, gpu_s in held)
    return None if blended is None else (blended[0], blended[1][0])


def blend(
    held: Iterable[tuple[str, tuple[float, ...], float]],
) -> tuple[tuple[str, ...], tuple[float, ...]] | None:
    """(names, each figure's mean by GPU-seconds) of named figures held `(name, figures, gpu_seconds)`: a
    name's GPU-seconds add up (its figures are the last given); names most GPU-seconds first; None without
    any GPU-seconds."""
    figures_of: dict[str, tuple[float, ...]] = {}
    gpu_s_of: dict[str, float] = {}
    for name, figures, gpu_s in held:
        if gpu_s > 0:
            figures_of[name] = figures
            gpu_s_of[name] = gpu_s_of.get(name, 0.0) + gpu_s
    if not gpu_s_of:
        return None
    names = tuple(sorted(gpu_s_of, key=lambda name: (-gpu_s_of[name], name)))
    weights = [gpu_s_of[name] for name in names]
    columns = zip(*(figures_of[name] for name in names), strict=True)
    return names, tuple(fmean(column, weights) for column in columns)
