"""The FGD packing protocol: inflation, binning, and agreement with the published reference runs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from suanli.domain.catalog_data import CATALOG
from suanli.domain.fragmentation import typical_mix
from suanli.domain.policies import build_policy
from suanli.domain.request import GpuShare, Request, WholeGpus
from suanli.sim.packing import PackingRun, gpus_of, inflate, parse_seeds, run_packing
from suanli.sim.traces import read_openb_nodes, read_openb_pods

TRACE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "alibaba-gpu-2023"
POD_SHAPES = [WholeGpus(1), GpuShare(500), WholeGpus(0), WholeGpus(8)]


def _pods() -> list[Request]:
    return [Request(f"p{i}", POD_SHAPES[i % 4], cpu_milli=1000) for i in range(40)]


def test_inflation_stops_before_the_target_and_is_seeded() -> None:
    pods = _pods()
    drawn = inflate(pods, capacity_gpus=100, seed=7)
    requested = sum(gpus_of(p) for p in drawn)
    assert requested <= 130
    assert requested > 130 - 8  # the next draw would have passed the target
    assert [p.id for p in inflate(pods, 100, seed=7)] == [p.id for p in drawn]
    assert [p.id for p in inflate(pods, 100, seed=8)] != [p.id for p in drawn]
    assert len({p.id for p in drawn}) == len(drawn)


def test_bins_average_the_pods_whose_arrived_percent_rounds_to_the_level() -> None:
    run = PackingRun("x", 1, 100)
    for arrived, allocated in [(99.4, 90.0), (99.6, 91.0), (100.4, 93.0), (100.6, 94.0)]:
        run.record(arrived, allocated)
    assert run.unallocated_pct(100) == pytest.approx(100 - 92.0)
    assert run.unallocated_pct(101) == pytest.approx(100 - 94.0)
    assert run.unallocated_pct(130) == pytest.approx(100 - 94.0)


@pytest.mark.parametrize(("text", "seeds"), [("42-44", [42, 43, 44]), ("1,5-6", [1, 5, 6]), ("9", [9])])
def test_seed_ranges(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.skipif(not TRACE.is_dir(), reason="the shared Alibaba trace is not next to this checkout")
@pytest.mark.parametrize("policy", ["best-fit", "fgd"])
def test_protocol_reproduces_the_reference_run_of_seed_42(policy: str) -> None:
    """Our baselines land within 0.5 points of the simulator authors' own runs on the same seed."""
    fleet = read_openb_nodes(TRACE / "openb_node_list_gpu_node.csv")
    workload = [p.request for p in read_openb_pods(TRACE / "openb_pod_list_default.csv", with_memory=True)]
    run = run_packing(
        fleet, CATALOG, workload, build_policy(policy, seed=42, history=workload), 42, typical_mix(workload)
    )
    reference_name = {"best-fit": "05-BestFit", "fgd": "06-FGD"}[policy]
    with (TRACE / "fgd_expected_results" / "analysis_allo_discrete.csv").open() as handle:
        row = next(
            r for r in csv.DictReader(handle) if r["sc_policy"] == reference_name and r["seed"] == "42"
        )
    for level in (95, 100, 130):
        assert run.unallocated_pct(level) == pytest.approx(100 - float(row[str(level)]), abs=0.5)
