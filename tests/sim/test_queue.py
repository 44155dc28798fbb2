"""The queueing replay on a tiny synthetic ITP-style trace: every job completes, figures and files written."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from suanli.cli.main import app
from suanli.sim.itp import (
    DurationEstimate,
    TraceJob,
    gang_shape,
    nodes_for_load,
    offered_load,
    parse_estimate,
    read_itp_jobs,
    synthetic_fleet,
)
from suanli.sim.queue import POLICIES, RESTART_S, parse_mix, run_queue
from suanli.sim.queue_outputs import results_json
from suanli.sim.queue_report import queue_command
from suanli.sim.queue_result import percentile
from suanli.sim.queue_tables import print_trims

ROWS = [
    ("a", 0, 100, 8),
    ("b", 10, 50, 4),
    ("c", 20, 30, 1),
    ("d", 30, 400, 16),
    ("e", 40, 20, 1),
    ("f", 50, 3000, 2),
    ("g", 60, 10, 8),
    ("h", 70, 7200, 1),
]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    body = "\n".join(f"{j},{s},{d},{g}" for j, s, d, g in ROWS)
    path.write_text(
        "job_id,submission_time,duration,num_gpu\n" + body
    )  # no trailing newline, as the ITP files
    return path


def test_loader_reads_a_file_without_a_trailing_newline(trace: Path):
    jobs = read_itp_jobs(trace)
    assert [j.job_id for j in jobs] == list("abcdefgh") and jobs[-1] == TraceJob("h", 70, 7200, 1)


def test_gangs_and_uneven_jobs_are_shaped_per_node():
    assert gang_shape(4, 8) == (4, 1)
    assert gang_shape(64, 8) == (8, 8)
    assert gang_shape(12, 8) == (6, 2)  # uneven: spread evenly, rounded up


def test_declared_durations_are_never_below_the_truth():
    job = TraceJob("x", 0, 5000, 1)
    assert DurationEstimate("pow2h").declared(job) == 7200
    assert DurationEstimate("pow2h").declared(TraceJob("y", 0, 30, 1)) == 3600
    factor = DurationEstimate("factor", seed=3).declared(job)
    assert 5000 <= factor <= 15000 and factor == DurationEstimate("factor", seed=3).declared(job)


def test_offered_load_and_sizing(trace: Path):
    jobs = read_itp_jobs(trace)
    work = sum(d * g for _, _, d, g in ROWS)
    assert offered_load(jobs, 16) == pytest.approx(work / (70 * 16))
    nodes = nodes_for_load(jobs, 8, 0.85)
    assert offered_load(jobs, nodes * 8) <= 0.85 < offered_load(jobs, (nodes - 1) * 8)


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_job_completes_and_waits_are_never_negative(trace: Path, name: str):
    result = run_queue(synthetic_fleet(2, 8), read_itp_jobs(trace), name)
    assert len(result.jct_s) == len(ROWS)
    assert all(w >= -1e-9 for w in result.wait_s)
    summary = result.summary()
    assert summary["mean_queue_s"] <= summary["p99_queue_s"] <= summary["max_queue_s"] == max(result.wait_s)
    assert 0 < result.mean_alloc_pct <= 100
    assert result.p95_jct_s >= result.mean_jct_s * 0 and result.jobs_per_s > 0


def test_backfill_is_no_worse_than_fifo_on_the_tiny_trace(trace: Path):
    fleet, jobs = synthetic_fleet(2, 8), read_itp_jobs(trace)
    fifo = run_queue(fleet, jobs, "fifo")
    easy = run_queue(fleet, jobs, "fifo-easy")
    assert easy.mean_jct_s <= fifo.mean_jct_s


def test_a_tier_mix_replays_and_reports_per_tier(tmp_path: Path):
    path = tmp_path / "busy.csv"
    rows = [f"s{i},{i},5000,8" for i in range(4)] + [f"o{i},{100 + i},100,8" for i in range(4)]
    path.write_text("job_id,submission_time,duration,num_gpu\n" + "\n".join(rows))
    jobs = read_itp_jobs(path)
    mix = parse_mix("spot=1")
    from suanli.sim.queue import build_requests

    spot_then_od = [r.tier.label for r in build_requests(jobs, 8, DurationEstimate(), mix)]
    assert set(spot_then_od) == {"spot"}
    result = run_queue(synthetic_fleet(2, 8), jobs, "suanli", mix=parse_mix("on_demand=0.5,spot=0.5"), seed=1)
    assert len(result.jct_s) == len(rows)
    assert result.preemptions >= 0
    assert set(result.per_tier()) <= {"spot", "on_demand"}


def test_percentile_is_nearest_rank():
    assert percentile([1, 2, 3, 4], 95) == 4 and percentile([5], 50) == 5


def test_command_writes_json_and_plots(trace: Path, tmp_path: Path):
    out = tmp_path / "q.json"
    console = Console(record=True, width=120)
    results = queue_command("2:8", trace, ["all"], None, out, tmp_path / "plots", console)
    data = json.loads(out.read_text())
    assert data["capacity_gpus"] == 16 and set(data["policies"]) == set(POLICIES)
    for figures in data["policies"].values():
        assert {
            "mean_jct_s",
            "p95_jct_s",
            "mean_queue_s",
            "mean_alloc_pct",
            "idle_waiting_pct",
            "idle_held_pct",
            "idle_scattered_pct",
            "preemptions",
            "lost_work_pct",
            "owed_gpu_h",
            "jobs_per_s",
        } <= set(figures)
    assert (tmp_path / "plots" / "allocation.png").stat().st_size > 0
    assert (tmp_path / "plots" / "queue.png").exists()
    assert "fifo-backfill" in console.export_text()
    assert results_json(results)["policies"]["fifo"]["mean_jct_s"] == data["policies"]["fifo"]["mean_jct_s"]


def test_idle_while_waiting_splits_off_the_drain_for_the_blocked_head():
    """A 2-node gang waits 9 h for a running job: the free node idles, held for it from the start, whether
    or not backfill needed the reservation (before `long` arrives nothing could pass the gang, and EASY
    skips reserving: the idle counted as held only from then, and the split depended on the shortcut)."""
    jobs = [
        TraceJob("a", 0, 36_000, 8),  # one node for 10 h
        TraceJob("gang", 3_600, 3_600, 16),  # both nodes: blocked until `a` ends
        TraceJob("long", 7_200, 72_000, 8),  # would fit the free node but delay the gang
        TraceJob("late", 72_000, 60, 1),  # ends the arrival window at 20 h
    ]
    fleet = synthetic_fleet(2, 8)
    easy = run_queue(fleet, jobs, "fifo-easy")
    fifo = run_queue(fleet, jobs, "fifo")
    free_node_gpu_s = 8 * (36_000 - 3_600)
    assert easy.idle_waiting_gpu_s == pytest.approx(free_node_gpu_s)
    for drained in (easy, run_queue(fleet, jobs, "fifo-backfill"), run_queue(fleet, jobs, "suanli")):
        assert drained.idle_held_gpu_s == pytest.approx(free_node_gpu_s)
    assert fifo.idle_waiting_gpu_s == pytest.approx(free_node_gpu_s) and fifo.idle_held_gpu_s == 0
    assert easy.idle_waiting_pct == pytest.approx(100 * free_node_gpu_s / (72_000 * 16))
    summary = easy.summary()
    assert summary["idle_held_pct"] <= summary["idle_waiting_pct"] <= 100 - summary["mean_alloc_pct"]
    # the free node could take one of the gang's nodes: too little in all, but not scattered
    assert easy.idle_scattered_gpu_s == fifo.idle_scattered_gpu_s == 0


def test_idle_in_pieces_smaller_than_any_waiting_job_counts_as_scattered():
    """Two 7-GPU jobs leave one GPU free on each node for 10 h; a 2-GPU job waits 9 h for them to end."""
    jobs = [
        TraceJob("a", 0, 36_000, 7),
        TraceJob("b", 0, 36_000, 7),
        TraceJob("pair", 3_600, 3_600, 2),  # fits neither node's single free GPU
        TraceJob("late", 72_000, 60, 1),
    ]
    for policy in ("fifo", "suanli"):
        result = run_queue(synthetic_fleet(2, 8), jobs, policy)
        assert result.idle_waiting_gpu_s == pytest.approx(2 * (36_000 - 3_600))
        scattered = result.idle_waiting_gpu_s - result.idle_held_gpu_s
        assert result.idle_scattered_gpu_s == pytest.approx(scattered) and scattered > 0
    # in strict order a 1-GPU job behind `pair` could use a piece: idle, but not scattered
    behind = [*jobs[:3], TraceJob("single", 3_600, 3_600, 1), jobs[3]]
    result = run_queue(synthetic_fleet(2, 8), behind, "fifo")
    assert result.idle_waiting_gpu_s == pytest.approx(2 * (36_000 - 3_600))
    assert result.idle_scattered_gpu_s == 0


def test_work_owed_at_the_last_arrival_is_what_the_window_did_not_allocate():
    """`a` holds the node for 10 h from 0; `b` (8 GPUs, 1 h) arrives at 1 h, the last arrival: 9 h of `a`
    and all of `b` are owed, and the window [0, 1 h] is fully allocated."""
    jobs = [TraceJob("a", 0, 36_000, 8), TraceJob("b", 3_600, 3_600, 8)]
    for policy in POLICIES:
        result = run_queue(synthetic_fleet(1, 8), jobs, policy)
        assert result.owed_gpu_h == pytest.approx(8 * 9 + 8 * 1)
        assert result.mean_alloc_pct == pytest.approx(100.0)
        total_gpu_h = 8 * 10 + 8 * 1
        window_gpu_h = 8 * 1
        assert result.mean_alloc_pct == pytest.approx(100 * (total_gpu_h - result.owed_gpu_h) / window_gpu_h)
        assert result.summary()["owed_gpu_h"] == 80.0


def test_a_job_bigger_than_the_fleet_does_not_count_as_waiting():
    jobs = [TraceJob("huge", 0, 60, 64), TraceJob("small", 10, 60, 1), TraceJob("late", 7_200, 60, 1)]
    result = run_queue(synthetic_fleet(2, 8), jobs, "suanli")
    assert len(result.jct_s) == 2 and result.idle_waiting_gpu_s == 0


def test_work_a_preemption_throws_away_is_counted_unless_jobs_checkpoint():
    """Spot holds the one node; on-demand arrives at 100 s and preempts it with 30 s notice: 8 GPUs x 130 s
    are lost, and the spot job runs again in full after the on-demand one; with `checkpoint` it saves at the
    deadline and runs only the 870 s left."""
    from suanli.domain.request import Request, Tier, WholeGpus
    from suanli.sim.queue import run_requests

    spot = Request("spot", WholeGpus(8), tier=Tier.SPOT, bid_micros_per_hour=1_000_000, max_duration_s=3600)
    on_demand = Request("od", WholeGpus(8), submitted_at_s=100, max_duration_s=3600)
    fleet, true_s = synthetic_fleet(1, 8), [1_000.0, 100.0]
    result = run_requests(fleet, [spot, on_demand], true_s, "suanli")
    assert result.preemptions == 1 and result.lost_gpu_s == pytest.approx(8 * 130)
    assert sorted(result.jct_s) == pytest.approx([130.0, 230 + 1_000.0])  # od: notice 30 s + 100 s
    assert result.lost_work_pct == pytest.approx(100 * 8 * 130 / (8 * (130 + 100 + 1_000)))
    assert result.summary()["lost_work_pct"] == round(result.lost_work_pct, 2)

    saved = run_requests(fleet, [spot, on_demand], true_s, "suanli", checkpoint=True, restart_s=0)
    assert saved.preemptions == 1 and saved.lost_gpu_s == 0
    assert sorted(saved.jct_s) == pytest.approx([130.0, 230 + 1_000.0 - 130])  # resumes with 870 s left

    restarted = run_requests(fleet, [spot, on_demand], true_s, "suanli", checkpoint=True)
    assert restarted.lost_gpu_s == pytest.approx(8 * RESTART_S)  # its restart from the checkpoint
    assert sorted(restarted.jct_s) == pytest.approx([130.0, 230 + 870 + RESTART_S])
    assert restarted.wait_s == pytest.approx([30.0, 100.0])  # od: the notice; spot: od's run


def test_the_declared_duration_rule_is_read_from_its_command_line_form():
    assert parse_estimate("pow2h") == DurationEstimate()
    assert parse_estimate("exact") == DurationEstimate("exact")
    assert parse_estimate("factor", seed=4) == DurationEstimate("factor", max_factor=3.0, seed=4)
    assert parse_estimate(" factor:1.5 ") == DurationEstimate("factor", max_factor=1.5)
    for bad, why in (
        ("weekly", "use pow2h"),
        ("exact:2", "use pow2h"),
        ("factor:x", "MAX is not a number"),
        ("factor:0.5", "MAX is out of range"),
        ("factor:inf", "MAX is out of range"),
        ("factor:nan", "MAX is out of range"),
    ):
        with pytest.raises(ValueError, match=f"--estimate {bad}: {why}"):
            parse_estimate(bad)
    with pytest.raises(ValueError, match="unknown duration estimate"):
        DurationEstimate("weekly")
    with pytest.raises(ValueError, match="max_factor"):
        DurationEstimate("factor", max_factor=0.9)


def test_the_queue_command_replays_with_the_declared_durations_asked_for(trace: Path, tmp_path: Path):
    runner = CliRunner()
    figures = {}
    for rule in ("pow2h", "exact"):
        out = tmp_path / f"{rule}.json"
        args = ["sim", "queue", "--nodes", "2:8", "--jobs", str(trace), "--policy", "fifo-easy"]
        outcome = runner.invoke(app, [*args, "--estimate", rule, "--json", str(out)])
        assert outcome.exit_code == 0, outcome.output
        figures[rule] = json.loads(out.read_text())
    assert figures["exact"]["declared_durations"] == "declared = true duration (oracle)"
    assert "power of two hours" in figures["pow2h"]["declared_durations"]
    # backfill reads the declared durations: the oracle's are shorter, so jobs finish sooner on this trace
    jct = {rule: f["policies"]["fifo-easy"]["mean_jct_s"] for rule, f in figures.items()}
    assert jct["exact"] < jct["pow2h"]
    bad = runner.invoke(app, [*args, "--estimate", "factor:0"])
    assert bad.exit_code == 2 and "--estimate factor:0: MAX is out of range" in bad.output


def test_an_error_naming_a_file_shows_its_name_as_it_is(tmp_path: Path):
    """Rich markup and emoji codes in a path are shown literally, not rendered (or dropped)."""
    missing = tmp_path / "a[bold]b:x:.csv"
    outcome = CliRunner().invoke(app, ["sim", "queue", "--nodes", "2:8", "--jobs", str(missing)])
    assert outcome.exit_code == 2
    assert "a[bold]b:x:.csv" in outcome.output.replace("\n", "")


def test_the_makespan_ends_at_the_last_completion_not_at_a_stale_notice_deadline():
    """Spot runs 110 s from 0; on-demand arrives at 100 s and preempts it with 30 s notice (deadline 130 s),
    but the spot job ends at 110 s on its own and on-demand runs 110-115 s: the last job ends at 115 s, and
    the kill left for 130 s belongs to a run that is over."""
    from suanli.domain.request import Request, Tier, WholeGpus
    from suanli.sim.queue import run_requests

    spot = Request("spot", WholeGpus(8), tier=Tier.SPOT, bid_micros_per_hour=1_000_000, max_duration_s=3600)
    on_demand = Request("od", WholeGpus(8), submitted_at_s=100, max_duration_s=3600)
    result = run_requests(synthetic_fleet(1, 8), [spot, on_demand], [110.0, 5.0], "suanli")
    assert result.preemptions == 0 and sorted(result.jct_s) == pytest.approx([15.0, 110.0])
    assert result.makespan_s == pytest.approx(115.0)
    assert result.makespan_alloc_pct == pytest.approx(100 * 8 * 115 / (115 * 8))


@pytest.mark.parametrize("row", ["x,10,nan,1", "x,nan,60,1", "x,10,inf,1", "x,-inf,60,1"])
def test_a_trace_time_that_is_not_a_finite_number_names_its_line(tmp_path: Path, row: str):
    """`nan` passed the loader's `duration >= 0` check, and the replay then looped for ever on an instant
    that equals nothing (a NaN arrival, or a NaN duration declared `exact`); `inf` gave a mean JCT of inf."""
    from suanli.domain.errors import FleetError

    path = tmp_path / "bad.csv"
    path.write_text(f"job_id,submission_time,duration,num_gpu\na,0,60,1\n{row}")
    with pytest.raises(FleetError, match=r"bad\.csv:3"):
        read_itp_jobs(path)


def test_a_rerun_jobs_queueing_delay_is_its_time_in_the_queue_not_its_lost_run():
    """Spot runs 0-130 s (preempted for on-demand, its work lost), waits 130-230 s while on-demand runs, then
    runs again in full 230-1,230 s: it queued 100 s, not JCT - true = 230 s (its lost 130 s ran, and is
    counted in lost_work_pct); on-demand queued 100-130 s. With `checkpoint` both readings agree."""
    from suanli.domain.request import Request, Tier, WholeGpus
    from suanli.sim.queue import run_requests

    spot = Request("spot", WholeGpus(8), tier=Tier.SPOT, bid_micros_per_hour=1_000_000, max_duration_s=3600)
    on_demand = Request("od", WholeGpus(8), submitted_at_s=100, max_duration_s=3600)
    fleet, true_s = synthetic_fleet(1, 8), [1_000.0, 100.0]
    rerun = run_requests(fleet, [spot, on_demand], true_s, "suanli")
    assert sorted(rerun.jct_s) == pytest.approx([130.0, 1_230.0])
    assert sorted(rerun.wait_s) == pytest.approx([30.0, 100.0])
    assert rerun.per_tier()["spot"]["mean_queue_s"] == pytest.approx(100.0)
    saved = run_requests(fleet, [spot, on_demand], true_s, "suanli", checkpoint=True)
    assert sorted(saved.wait_s) == pytest.approx([30.0, 100.0])  # runs 0-130 and 230-1,100 s


def test_figures_that_have_no_value_are_null_in_the_json_not_nan(tmp_path: Path):
    """One arrival has no arrival window, so no mean allocation; the file must stay JSON (NaN is not)."""
    path = tmp_path / "one.csv"
    path.write_text("job_id,submission_time,duration,num_gpu\na,0,60,1")
    out = tmp_path / "q.json"
    queue_command("1:8", path, ["fifo"], None, out, None, Console(quiet=True))

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    figures = json.loads(out.read_text(), parse_constant=refuse)["policies"]["fifo"]
    assert figures["mean_alloc_pct"] is None and figures["mean_jct_s"] == 60.0


BAD_MIXES = [
    "on_demand=1,spot=inf",
    "on_demand=1,spot=nan",
    "spot=-1,on_demand=2",
    "spot",
    "spot=",
    "gold=1",
    "spot=1e308,on_demand=1e308",  # the sum overflowed: random's "Total of weights must be greater than zero"
    "spot=1,spot=0",  # the second silently replaced the first
]


@pytest.mark.parametrize("text", BAD_MIXES)
def test_a_tier_mix_that_is_not_finite_and_non_negative_is_refused(text: str):
    """`spot=inf` normalised to on_demand 0 and spot NaN, and the replay failed later with random's
    'Total of weights must be finite', naming neither the option nor the value; a part without a number
    said only "could not convert string to float: ''"."""
    with pytest.raises(ValueError, match="--mix"):
        parse_mix(text)


def test_a_job_that_checkpoints_borrows_the_drain_and_resumes_after_the_head():
    """`old` holds n0 until 1000 s and a two-node head waits for it; `filler` (3000 s) would delay the head,
    so it waits for the head's end; when jobs checkpoint it borrows n1 at once, is taken back at 1000 with
    30 s notice, and resumes after the head with what is left and a restart: done 698 s sooner, the head
    30 s later (the notice)."""
    from suanli.domain.request import Request, WholeGpus
    from suanli.sim.queue import run_requests

    old = Request("old", WholeGpus(8), max_duration_s=1000)
    head = Request("head", WholeGpus(8), node_count=2, submitted_at_s=1, max_duration_s=50)
    filler = Request("filler", WholeGpus(4), submitted_at_s=2, max_duration_s=3600)
    fleet, requests, true_s = synthetic_fleet(2, 8), [old, head, filler], [1000.0, 50.0, 3000.0]
    waited = run_requests(fleet, requests, true_s, "suanli")
    assert waited.preemptions == 0 and waited.jct_s == pytest.approx([1000.0, 1049.0, 4048.0])
    borrowed = run_requests(fleet, requests, true_s, "suanli", checkpoint=True)
    assert borrowed.preemptions == 1
    assert borrowed.jct_s == pytest.approx([1000.0, 1079.0, 1080 + (3000 - 1028) + RESTART_S - 2])
    assert borrowed.lost_gpu_s == pytest.approx(4 * RESTART_S)
    assert borrowed.alloc_gpu_s_total == pytest.approx(waited.alloc_gpu_s_total + 4 * RESTART_S)


def test_an_elastic_job_starts_on_what_is_free_at_that_share_of_its_speed_and_grows_when_more_frees():
    """One 8-GPU node; a 4-GPU job runs 10 h; an 8-GPU job arriving at 0 starts on the other 4 GPUs at half
    speed, so by 10 h it has done 5 h of its 10; grown to 8 GPUs it ends 5 h later. Rigid, it waits 10 h."""
    from suanli.domain.request import Request, WholeGpus
    from suanli.sim.queue import run_requests

    hour = 3600.0
    first = Request("first", WholeGpus(4), max_duration_s=16 * hour)
    wide = Request("wide", WholeGpus(8), submitted_at_s=1, max_duration_s=16 * hour)
    fleet, true_s = synthetic_fleet(1, 8), [10 * hour, 10 * hour]
    elastic = run_requests(fleet, [first, wide], true_s, "suanli", elastic=0.5)
    assert sorted(elastic.jct_s) == pytest.approx([10 * hour, 15 * hour - 0.5])
    assert elastic.wait_s == pytest.approx([0.0, 0.0])  # it ran from its arrival, slower for a while
    rigid = run_requests(fleet, [first, wide], true_s, "suanli")
    assert sorted(rigid.jct_s) == pytest.approx([10 * hour, 20 * hour - 1])
    baseline = run_requests(fleet, [first, wide], true_s, "fifo-backfill", elastic=0.5)
    assert sorted(baseline.jct_s) == sorted(rigid.jct_s)  # a queue without elastic starts places it whole
    too_small = run_requests(fleet, [first, wide], true_s, "suanli", elastic=0.75)
    assert sorted(too_small.jct_s) == sorted(rigid.jct_s)  # 4 GPUs free are below its 6
    restarted = run_requests(fleet, [first, wide], true_s, "suanli", elastic=0.5, resize_restart_s=100)
    assert sorted(restarted.jct_s) == pytest.approx([10 * hour, 15 * hour - 0.5 + 100])  # its growth's
    assert restarted.lost_gpu_s == pytest.approx(8 * 100)  # 8 GPUs restarting for 100 s


def test_a_running_elastic_job_grows_after_what_waits_has_started_as_on_the_server():
    """One 8-GPU node: a 6-GPU job runs 100 s; an elastic 8-GPU job starts on the other 2 at 1 s; a 1-GPU
    job waits from 2 s. At 100 s the waiting job starts first (it ends at 150 s) and the elastic one grows
    onto the 5 GPUs left, then onto the last at 150 s: 99 s at a quarter of its speed, 50 s at 7/8, the
    rest at full speed, so it ends at 1,081.5 s. Growing first, it would take all 6 and the 1-GPU job wait
    for it."""
    from suanli.domain.request import Request, WholeGpus
    from suanli.sim.queue import run_requests

    first = Request("first", WholeGpus(6), max_duration_s=3600)
    wide = Request("wide", WholeGpus(8), submitted_at_s=1, max_duration_s=3600)
    small = Request("small", WholeGpus(1), submitted_at_s=2, max_duration_s=3600)
    fleet, true_s = synthetic_fleet(1, 8), [100.0, 1_000.0, 50.0]
    result = run_requests(fleet, [first, wide, small], true_s, "suanli", elastic=0.25)
    assert result.jct_s == pytest.approx([100.0, 148.0, 1_080.5])
    assert result.wait_s == pytest.approx([0.0, 98.0, 0.0])


def test_an_elastic_spot_job_is_trimmed_for_an_on_demand_one_rather_than_evicted_and_grows_back():
    """Spot holds the 8-GPU node, elastic down to 4; on-demand asks for 4 at 100 s. With 30 s notice the
    spot job gives back 4 GPUs at 130 s and runs on at half speed (820 s of its work left at 230 s), grows
    back when on-demand ends at 230 s, and ends at 1,050 s: nothing lost. Rigid, it is evicted: 8 GPUs x
    130 s lost and its 1,000 s run again after on-demand's."""
    from suanli.domain.request import Request, Tier, WholeGpus
    from suanli.sim.queue import run_requests

    spot = Request("spot", WholeGpus(8), tier=Tier.SPOT, bid_micros_per_hour=1_000_000, max_duration_s=3600)
    on_demand = Request("od", WholeGpus(4), submitted_at_s=100, max_duration_s=3600)
    fleet, true_s = synthetic_fleet(1, 8), [1_000.0, 100.0]
    trimmed = run_requests(fleet, [spot, on_demand], true_s, "suanli", elastic=0.5)
    assert (trimmed.trims, trimmed.preemptions, trimmed.lost_gpu_s) == (1, 0, 0)
    assert sorted(trimmed.jct_s) == pytest.approx([130.0, 1_050.0])
    assert trimmed.summary()["trims"] == 1
    # each resize restarting for 50 s: 4 GPUs idle 130-180 s, then half speed to 230 s (25 s of work: 845
    # left), 8 GPUs idle 230-280 s, and the rest at full speed
    restarted = run_requests(fleet, [spot, on_demand], true_s, "suanli", elastic=0.5, resize_restart_s=50)
    assert sorted(restarted.jct_s) == pytest.approx([130.0, 1_125.0])
    assert restarted.lost_gpu_s == pytest.approx(4 * 50 + 8 * 50) and restarted.preemptions == 0
    evicted = run_requests(fleet, [spot, on_demand], true_s, "suanli")
    assert (evicted.trims, evicted.preemptions, evicted.lost_gpu_s) == (0, 1, 8 * 130)
    assert sorted(evicted.jct_s) == pytest.approx([130.0, 1_230.0])
    printed = Console(record=True, width=120)
    print_trims(printed, [trimmed, evicted])
    assert "elastic victims that gave back part of their GPUs and ran on): suanli 1, suanli 0" in (
        printed.export_text()
    )


@pytest.mark.parametrize("share", [0.0, 1.5])
def test_an_elastic_share_outside_0_1_is_refused(share: float):
    from suanli.domain.errors import RequestError
    from suanli.domain.request import Request, WholeGpus
    from suanli.sim.queue import run_requests

    with pytest.raises(RequestError) as refused:
        run_requests(synthetic_fleet(1, 8), [Request("r", WholeGpus(8))], [60.0], "suanli", elastic=share)
    assert refused.value.field == "elastic"


def test_an_elastic_job_that_checkpoints_saves_its_work_when_evicted_and_resumes():
    """Spot holds the node, elastic down to 4 and checkpointing; on-demand needs all 8 at 100 s, so the spot
    job is evicted (a trim would leave too few): it saves its 130 s of work at the deadline and runs the
    870 s left once on-demand ends at 230 s (plus its restart, when one is charged)."""
    from suanli.domain.request import Request, Tier, WholeGpus
    from suanli.sim.queue import run_requests

    spot = Request("spot", WholeGpus(8), tier=Tier.SPOT, bid_micros_per_hour=1_000_000, max_duration_s=3600)
    on_demand = Request("od", WholeGpus(8), submitted_at_s=100, max_duration_s=3600)
    fleet, true_s = synthetic_fleet(1, 8), [1_000.0, 100.0]
    saved = run_requests(
        fleet, [spot, on_demand], true_s, "suanli", elastic=0.5, checkpoint=True, restart_s=0
    )
    assert (saved.preemptions, saved.trims, saved.lost_gpu_s) == (1, 0, 0)
    assert sorted(saved.jct_s) == pytest.approx([130.0, 1_100.0])
    restarted = run_requests(fleet, [spot, on_demand], true_s, "suanli", elastic=0.5, checkpoint=True)
    assert restarted.lost_gpu_s == pytest.approx(8 * RESTART_S)
    assert sorted(restarted.jct_s) == pytest.approx([130.0, 1_100.0 + RESTART_S])
    assert sorted(restarted.wait_s) == pytest.approx([30.0, 100.0])  # od: the notice; spot: od's run


def test_the_queue_command_says_when_jobs_are_elastic(trace: Path, tmp_path: Path):
    out = tmp_path / "elastic.json"
    args = ["sim", "queue", "--nodes", "2:8", "--jobs", str(trace), "--policy", "suanli", "--json", str(out)]
    outcome = CliRunner().invoke(app, [*args, "--elastic", "0.25"])
    assert outcome.exit_code == 0, outcome.output
    assert "elastic: may start on 25% of their GPUs" in " ".join(outcome.output.split())
    assert "25% of their GPUs" in json.loads(out.read_text())["elastic_jobs"]
    rigid = CliRunner().invoke(app, [*args])
    assert rigid.exit_code == 0 and json.loads(out.read_text())["elastic_jobs"].startswith("none")
    bad = CliRunner().invoke(app, [*args, "--elastic", "2"])
    assert bad.exit_code == 2 and "--elastic" in bad.output
    restarting = CliRunner().invoke(app, [*args, "--elastic", "0.25", "--resize-restart-s", "300"])
    assert restarting.exit_code == 0, restarting.output
    assert "each resize restarting for 300 s" in json.loads(out.read_text())["elastic_jobs"]
    lonely = CliRunner().invoke(app, [*args, "--resize-restart-s", "300"])
    assert lonely.exit_code == 2 and "--resize-restart-s" in lonely.output and "elastic" in lonely.output


@pytest.mark.parametrize("seed", range(1, 9))
@pytest.mark.parametrize("checkpoint", [False, True])
def test_every_allocated_gpu_second_is_work_done_or_counted_lost(checkpoint: bool, seed: int):
    """A random busy workload with every tier, elastic jobs trimmed, grown and evicted, each resize
    restarting for 120 s: the GPU-seconds allocated over the replay are the jobs' work at full size plus
    what was counted lost (reruns, restarts), never more or less, so no restart is missed or counted twice."""
    from suanli.domain.request import Request, Tier, WholeGpus
    from suanli.sim.itp import synthetic_fleet
    from suanli.sim.queue import run_requests

    rng = random.Random(seed)
    requests, true_s = [], []
    for n in range(120):
        tier = rng.choice([Tier.ON_DEMAND, Tier.SPOT, Tier.SPOT, Tier.RESERVED])
        nodes = rng.choice([1, 1, 1, 2])
        gpus = 8 if nodes > 1 else rng.choice([1, 2, 4, 8])
        run_s = float(rng.randint(200, 6_000))
        bid = rng.randint(1, 10) * 100_000 if tier is Tier.SPOT else None
        requests.append(
            Request(
                f"j{n:03d}",
                WholeGpus(gpus),
                node_count=nodes,
                submitted_at_s=n * 90.0,
                max_duration_s=2 * run_s,
                tier=tier,
                bid_micros_per_hour=bid,
            )
        )
        true_s.append(run_s)
    fleet = synthetic_fleet(4, 8)
    result = run_requests(
        fleet, requests, true_s, "suanli", elastic=0.25, checkpoint=checkpoint, resize_restart_s=120
    )
    assert len(result.jct_s) == len(requests) and result.preemptions + result.trims > 0
    work = sum(r.shape.count * r.node_count * t for r, t in zip(requests, true_s, strict=True))
    assert result.alloc_gpu_s_total == pytest.approx(work + result.lost_gpu_s, rel=1e-9)


def test_the_queue_command_refuses_bad_options_before_replaying_and_names_them(trace: Path, tmp_path: Path):
    base = ["sim", "queue", "--nodes", "2:8", "--jobs", str(trace)]
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    empty = tmp_path / "empty.csv"
    empty.write_text("job_id,submission_time,duration,num_gpu\n")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00job")
    for args, says in (
        (["sim", "queue", "--nodes", "2:8", "--jobs", str(tmp_path / "none.csv")], "--jobs"),
        (["sim", "queue", "--nodes", "2:8", "--jobs", str(tmp_path)], "is a directory"),
        (["sim", "queue", "--nodes", "13", "--jobs", str(trace)], "--nodes 13: not N:M"),
        ([*base, "--policy", " , "], "--policy: name at least one policy"),
        ([*base, "--plot", str(a_file)], "is not a directory"),
        ([*base, "--plot", str(a_file / "charts")], "--plot"),  # under a file: no folder can be made there
        ([*base, "--json", str(a_file / "out.json")], "--json"),
        ([*base, "--policy", "tetris"], "--policy: unknown tetris"),
        ([*base, "--mix", "spot"], "--mix"),
        ([*base, "--json", str(tmp_path)], "--json"),
        ([*base, "--policy", "all,fifo"], "--policy: all names every policy"),
        ([*base, "--resize-restart-s", "60"], "--resize-restart-s: only elastic jobs"),
        ([*base, "--elastic", "0.5", "--resize-restart-s", "inf"], "--resize-restart-s inf: from 0"),
        (["sim", "queue", "--nodes", "99999999999:8", "--jobs", str(trace)], "at most 100,000 nodes"),
        (["sim", "queue", "--nodes", "3:99999", "--jobs", str(trace)], "of at most 64 GPUs"),
        (["sim", "queue", "--nodes", str(empty), "--jobs", str(trace)], "--nodes (a fleet TOML"),
        (["sim", "queue", "--nodes", "2:8", "--jobs", str(binary)], "not a text (UTF-8) CSV file"),
        (["sim", "queue", "--nodes", "2:8", "--jobs", str(empty)], "the trace holds no jobs"),
    ):
        outcome = CliRunner().invoke(app, args)
        assert outcome.exit_code == 2 and says in " ".join(outcome.output.split()), (args, outcome.output)
        assert "Traceback" not in outcome.output
    out = tmp_path / "new" / "folder" / "figures.json"  # its folder is made
    done = CliRunner().invoke(app, [*base, "--policy", "fifo", "--json", str(out)])
    assert done.exit_code == 0 and json.loads(out.read_text())["never_fit_jobs"] == 0


def test_jobs_that_can_never_fit_the_fleet_are_counted_and_said_not_silently_dropped(
    trace: Path, tmp_path: Path
):
    out = tmp_path / "small.json"
    args = ["sim", "queue", "--nodes", "2:4", "--jobs", str(trace), "--policy", "fifo", "--json", str(out)]
    outcome = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert outcome.exit_code == 0, outcome.output
    assert "1 of 8 jobs can never fit this fleet" in outcome.output  # d: 16 GPUs on 8
    figures = json.loads(out.read_text())
    assert figures["never_fit_jobs"] == 1 and figures["policies"]["fifo"]["completed"] == 7
    # left out of the replay itself: waiting forever, it filled the queue's chart and slowed the replay
    (result,) = queue_command("2:4", trace, ["fifo"], None, None, None, Console(file=io.StringIO()))
    assert result.jobs == 7 and result.samples[-1][2] == 0
    wide = tmp_path / "wide.csv"
    wide.write_text("job_id,submission_time,duration,num_gpu\nw,0,60,16")
    refused = CliRunner().invoke(app, ["sim", "queue", "--nodes", "1:8", "--jobs", str(wide)])
    assert refused.exit_code == 2 and "no job of the trace fits this fleet" in refused.output


def test_with_a_tier_mix_the_figures_fit_80_columns_and_each_tier_has_its_own(trace: Path, tmp_path: Path):
    out = tmp_path / "mix.json"
    args = ["sim", "queue", "--nodes", "1:8", "--jobs", str(trace), "--json", str(out), "--seed", "1"]
    args += ["--policy", "suanli-wide-first,fifo-backfill", "--mix", "on_demand=0.5,spot=0.5"]
    outcome = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert outcome.exit_code == 0, outcome.output
    assert "…" not in outcome.output  # no figure is cut short
    assert "by tier" in outcome.output and "spot" in outcome.output and "empted" in outcome.output
    figures = json.loads(out.read_text())
    assert figures["policies"]["suanli-wide-first"]["per_tier"]["spot"]["preemptions"] == 2
    assert figures["tier_mix"] == {"on_demand": 0.5, "spot": 0.5}
    for policy in figures["policies"].values():
        tiers = policy["per_tier"]
        assert sum(t["jobs"] for t in tiers.values()) == policy["completed"]
        assert sum(t["preemptions"] for t in tiers.values()) == policy["preemptions"]


def test_gpus_that_take_shares_let_fractional_pods_run_on_a_synthetic_fleet(tmp_path: Path):
    """Most Alibaba pods ask part of a GPU: on `N:M` (whole GPUs) they can never fit and are counted so; on
    `N:M:shared` they run beside whole-GPU pods."""
    pods = tmp_path / "pods.csv"
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    rows = [
        "p0,1000,1024,1,1000,,LS,Running,0,3600,0",
        "p1,1000,1024,1,500,,LS,Running,10,1800,10",
        "p2,1000,1024,1,250,,LS,Running,20,900,20",
    ]
    pods.write_text(header + "scheduled_time\n" + "\n".join(rows) + "\n")
    figures = {}
    for nodes in ("1:8", "1:8:shared"):
        out = tmp_path / f"{nodes.replace(':', '-')}.json"
        args = ["sim", "queue", "--nodes", nodes, "--jobs", str(pods), "--policy", "fifo", "--json", str(out)]
        outcome = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert outcome.exit_code == 0, outcome.output
        figures[nodes] = json.loads(out.read_text())
    assert figures["1:8"]["never_fit_jobs"] == 2 and figures["1:8"]["policies"]["fifo"]["completed"] == 1
    assert (
        figures["1:8:shared"]["never_fit_jobs"] == 0
        and figures["1:8:shared"]["policies"]["fifo"]["completed"] == 3
    )
    bad = CliRunner().invoke(app, ["sim", "queue", "--nodes", "1:8:mig", "--jobs", str(pods)])
    assert bad.exit_code == 2 and "only :whole or :shared" in " ".join(bad.output.split())


def test_a_contract_sold_ahead_holds_its_gpus_for_the_holder_and_keeps_on_demand_off_them():
    """The mix's reserved job becomes the holder's on-demand request: on 16 GPUs with 8 sold, the second
    on-demand job waits for the first rather than take the held GPUs, and the holder's job starts on
    arrival; without it both on-demand jobs start, and the reserved job preempts one, after the notice."""
    from suanli.domain.request import Request, Tier, WholeGpus
    from suanli.sim.contract_sale import parse_contract, sell_contract
    from suanli.sim.queue import run_requests

    def job(name: str, at_s: float, tier: Tier = Tier.ON_DEMAND) -> Request:
        return Request(name, WholeGpus(8), submitted_at_s=at_s, max_duration_s=20_000, tier=tier)

    fleet = synthetic_fleet(2, 8)
    requests = [job("od1", 0), job("od2", 10), job("held", 100, Tier.RESERVED)]
    true_s = [10_000.0, 10_000.0, 1_000.0]
    sold, contract = sell_contract(requests, *parse_contract("8", fleet))
    assert [r.tier for r in sold] == [Tier.ON_DEMAND] * 3 and sold[2].tenant == contract.tenant
    held = run_requests(fleet, sold, true_s, "suanli", contracts=[contract]).per_tier()
    assert held["contract"]["jobs"] == 1 and held["contract"]["mean_queue_s"] == 0
    assert held["on_demand"]["mean_queue_s"] == pytest.approx(9_990 / 2)  # od2 waits for od1
    unsold = run_requests(fleet, requests, true_s, "suanli")
    assert "contract" not in unsold.per_tier() and unsold.preempted_by_tier == {"on_demand": 1}
    assert unsold.per_tier()["reserved"]["mean_queue_s"] == 30  # the victim's notice


def test_the_queue_command_sells_a_contract_and_names_a_bad_one(trace: Path, tmp_path: Path):
    out = tmp_path / "sold.json"
    args = ["sim", "queue", "--nodes", "2:8", "--jobs", str(trace), "--policy", "suanli", "--json", str(out)]
    mix = ["--mix", "on_demand=0.5,reserved=0.5", "--seed", "3"]
    outcome = CliRunner().invoke(app, [*args, *mix, "--contract", "H100-SXM-80GB@sim=8"])
    assert outcome.exit_code == 0, outcome.output
    assert "contract: 8 x H100-SXM-80GB in sim held" in " ".join(outcome.output.split())
    figures = json.loads(out.read_text())
    assert figures["contract"] == [
        {"model": "H100-SXM-80GB", "region": "sim", "gpus": 8, "held_for": "the mix's reserved jobs"}
    ]
    assert "contract" in figures["policies"]["suanli"]["per_tier"]
    elastic = CliRunner().invoke(app, [*args, *mix, "--contract", "8", "--elastic", "0.5"])
    assert (
        elastic.exit_code == 0 and "contract" in json.loads(out.read_text())["policies"]["suanli"]["per_tier"]
    )
    for extra, says in (
        (["--contract", "17"], "GPUS is 1 to the 16 GPUs of H100-SXM-80GB in sim, not 17"),
        (["--contract", "0"], "not 0"),
        (["--contract", "eight"], "give GPUS or MODEL@REGION=GPUS"),
        (["--contract", "H100@=8"], "the pool is MODEL@REGION"),
        (["--contract", "A100-80GB@sim=8"], "the fleet has no A100-80GB in sim (it has H100-SXM-80GB@sim)"),
    ):
        bad = CliRunner().invoke(app, [*args, *mix, *extra])
        assert bad.exit_code == 2 and says in " ".join(bad.output.split()), (extra, bad.output)
    alone = CliRunner().invoke(app, [*args, "--mix", "reserved=1", "--contract", "8"])  # one tier: the row
    assert alone.exit_code == 0 and "by tier" in alone.output and "contract" in alone.output, alone.output
    twice = CliRunner().invoke(app, [*args[:-2], "--policy", "fifo,fifo", "--json", str(out)])
    (speeds,) = [line for line in twice.output.splitlines() if line.startswith("replay speed")]
    assert twice.exit_code == 0 and speeds.count("fifo") == 1, twice.output  # replayed once
    assert list(json.loads(out.read_text())["policies"]) == ["fifo"]
    no_holder = CliRunner().invoke(app, [*args, "--contract", "8"])
    assert no_holder.exit_code == 2 and "draws no reserved jobs" in no_holder.output


def test_an_elastic_job_grows_only_onto_what_no_contract_holds_for_another_tenant():
    """One node of 8 GPUs, 4 sold ahead: an on-demand job of 8 that may start on 2 starts on the 4 not
    held and stays there (running at half speed) rather than grow onto the held ones, and the holder's job
    starts on arrival; with nothing sold it starts on all 8 and the reserved job trims it with notice."""
    from suanli.domain.request import Request, Tier, WholeGpus
    from suanli.sim.contract_sale import parse_contract, sell_contract
    from suanli.sim.queue import run_requests

    fleet = synthetic_fleet(1, 8)
    requests = [
        Request("od", WholeGpus(8), submitted_at_s=0, max_duration_s=4_000),
        Request("held", WholeGpus(4), submitted_at_s=100, max_duration_s=1_000, tier=Tier.RESERVED),
    ]
    true_s = [1_000.0, 500.0]
    sold, contract = sell_contract(requests, *parse_contract("4", fleet))
    result = run_requests(fleet, sold, true_s, "suanli", elastic=0.25, contracts=[contract])
    assert result.per_tier()["contract"]["mean_queue_s"] == 0
    assert result.per_tier()["on_demand"]["mean_jct_s"] == pytest.approx(2_000)  # on 4 of its 8 throughout
    unsold = run_requests(fleet, requests, true_s, "suanli", elastic=0.25)
    assert unsold.trims == 1 and unsold.per_tier()["reserved"]["mean_queue_s"] == 30


@pytest.mark.parametrize("order", ["too-big-first", "fitting-first"])
def test_a_pod_too_big_for_the_nodes_cpu_never_fits_whatever_the_order_and_one_that_fits_runs(
    tmp_path: Path, order: str
):
    """The first pod of a GPU shape decided for every later one: a pod asking more CPU than any node has
    made a fitting one of the same shape count as never fitting, or the other way round."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,8000,100000,8,G2\n")
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    big, fits = (
        "big,16000,1000,1,1000,,LS,Succeeded,{t},{e},{t}",
        "fits,1000,1000,1,1000,,LS,Succeeded,{t},{e},{t}",
    )
    first, second = (big, fits) if order == "too-big-first" else (fits, big)
    rows = [first.format(t=0, e=100), second.format(t=10, e=110)]
    pods = tmp_path / "pods.csv"
    pods.write_text(header + "scheduled_time\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out.json"
    args = [
        "sim",
        "queue",
        "--nodes",
        str(nodes),
        "--jobs",
        str(pods),
        "--policy",
        "fifo",
        "--json",
        str(out),
    ]
    outcome = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert outcome.exit_code == 0, outcome.output
    figures = json.loads(out.read_text())
    assert figures["never_fit_jobs"] == 1 and figures["policies"]["fifo"]["completed"] == 1


def test_itp_check_names_a_cluster_file_that_is_not_text(tmp_path: Path):
    (tmp_path / "cluster09.csv").write_bytes(bytes(range(128, 256)) * 4)
    args = ["sim", "itp-check", "--traces", str(tmp_path), "--cluster", "09"]
    outcome = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    said = " ".join(outcome.output.split())
    assert outcome.exit_code == 2 and "Traceback" not in said, said
    assert "cluster09.csv" in said and "not a text (UTF-8) CSV file" in said, said
