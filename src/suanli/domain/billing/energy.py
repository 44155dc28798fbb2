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
  then blended by GPU-seconds x TDP, so energy and CO2 stay exact where both changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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


def blend_regions(
    held: Iterable[tuple[str, float, float, float]],
) -> tuple[tuple[str, ...], float, float] | None:
    """(region names, PUE, grid g/kWh) that give the energy and CO2 of GPU-seconds spread over regions,
    from `(name, pue, grid_gco2_per_kwh, gpu_seconds)`; names most GPU-seconds first; None without any."""
    by_region: dict[str, tuple[float, float, float]] = {}
    for name, pue, grid, gpu_s in held:
        if gpu_s > 0:
            by_region[name] = (pue, grid, by_region.get(name, (pue, grid, 0.0))[2] + gpu_s)
    if not by_region:
        return None
    total_gpu_s = sum(gpu_s for _, _, gpu_s in by_region.values())
    pue = sum(p * gpu_s for p, _, gpu_s in by_region.values()) / total_gpu_s
    grid = sum(p * g * gpu_s for p, g, gpu_s in by_region.values()) / (pue * total_gpu_s)
    return tuple(sorted(by_region, key=lambda name: (-by_region[name][2], name))), pue, grid


def blend_models(held: Iterable[tuple[str, float, float]]) -> tuple[tuple[str, ...], float] | None:
    """(model names, TDP W) that give the estimated energy of GPU-seconds spread over GPU models, from
    `(name, tdp_watts, gpu_seconds)`: the TDPs' mean by GPU-seconds; names most GPU-seconds first; None
    without any."""
    by_model: dict[str, tuple[float, float]] = {}
    for name, tdp_w, gpu_s in held:
        if gpu_s > 0:
            by_model[name] = (tdp_w, by_model.get(name, (tdp_w, 0.0))[1] + gpu_s)
    if not by_model:
        return None
    total_gpu_s = sum(gpu_s for _, gpu_s in by_model.values())
    tdp_w = sum(tdp * gpu_s for tdp, gpu_s in by_model.values()) / total_gpu_s
    return tuple(sorted(by_model, key=lambda name: (-by_model[name][1], name))), tdp_w
