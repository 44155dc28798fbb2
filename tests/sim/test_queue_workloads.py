"""Queue replay workloads: openb pods detected by header and replayed with their lifetimes; synthetic jobs
offer the asked load; a 2,000-GPU replay completes every job (its speed is make bench's)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress

from suanli.domain.errors import FleetError
from suanli.domain.request import GpuShare, Tier
from suanli.sim.itp import TraceJob, offered_load, synthetic_fleet, synthetic_jobs
from suanli.sim.queue import DEFAULT_ESTIMATE, run_queue
from suanli.sim.queue_report import days_bar, load_fleet, load_workload, queue_command

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase," + (
    "creation_time,deletion_time,scheduled_time"
)
PODS = [
    "p0,4000,1024,1,1000,,LS,Running,0,500,0",
    "p1,2000,1024,1,500,,LS,Running,10,1010,10",
    "p2,8000,1024,2,1000,,LS,Failed,20,20,20",
    "p3,1000,1024,0,0,,BE,Running,30,90,30",
]
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,V100M16\nn1,64000,262144,2,V100M16\n"
TEMPLATE = [TraceJob(str(i), 60.0 * i * (1 + i % 3), 600.0 * (1 + i % 5), 1 + (i % 4) * 2) for i in range(50)]


@pytest.fixture
def pods(tmp_path: Path) -> Path:
    path = tmp_path / "pods.csv"
    path.write_text(POD_HEADER + "\n" + "\n".join(PODS) + "\n")
    return path


def test_pod_csv_is_detected_by_header_and_keeps_lifetimes(pods: Path, tmp_path: Path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES)
    fleet = load_fleet(str(nodes))
    requests, true_s, kind = load_workload(pods, fleet, DEFAULT_ESTIMATE, {Tier.ON_DEMAND: 1.0}, 0)
    assert kind == "openb pods"
    assert [r.submitted_at_s for r in requests] == [0, 10, 20, 30]
    assert true_s == [500, 1000, 1.0, 60]  # deletion - creation, at least 1 s
    assert isinstance(requests[1].shape, GpuShare)
    assert all(r.max_duration_s >= d for r, d in zip(requests, true_s, strict=True))
    out = tmp_path / "out.json"
    queue_command(str(nodes), pods, ["all"], None, out, None, Console(file=None, quiet=True))
    report = json.loads(out.read_text())
    assert report["workload"] == "openb pods"
    assert all(p["completed"] == 4 for p in report["policies"].values())


@pytest.mark.parametrize("arrivals", ["trace", "poisson"])
def test_synthetic_jobs_offer_the_asked_load(arrivals: str):
    jobs = synthetic_jobs(TEMPLATE, 2000, 800, load=0.85, seed=3, arrivals=arrivals)
    assert len(jobs) == 2000
    assert offered_load(jobs, 800) == pytest.approx(0.85, rel=0.1)
    assert {(j.gpus, j.duration_s) for j in jobs} <= {(j.gpus, j.duration_s) for j in TEMPLATE}
    assert jobs == synthetic_jobs(TEMPLATE, 2000, 800, load=0.85, seed=3, arrivals=arrivals)


def test_a_large_fleet_replays_every_job_and_reports_its_speed():
    """Speed is measured by `python -m suanli.sim.queue_bench` (make bench), not asserted here: a loaded
    CI machine is no place to time one."""
    fleet = synthetic_fleet(250, 8)  # 2,000 GPUs
    jobs = synthetic_jobs(TEMPLATE, 5000, fleet.gpu_count, load=0.9)
    result = run_queue(fleet, jobs, "suanli")
    assert len(result.jct_s) == 5000
    assert sum(result.jct_s) >= sum(job.duration_s for job in jobs)  # no job finished before it ran its time
    assert result.jobs_per_s > 0


def test_a_pod_runs_from_its_scheduling_to_its_deletion_and_a_never_scheduled_one_is_left_out(tmp_path: Path):
    """In the trace p0 waited 400 s (created 0, scheduled 400) and ran 100 s until its deletion at 500; p1
    was never scheduled (Pending, deleted at 300): it held no GPU, so it is no job to replay."""
    pods = tmp_path / "pods.csv"
    pods.write_text(
        POD_HEADER + "\np0,4000,1024,1,1000,,LS,Succeeded,0,500,400\np1,4000,1024,1,1000,,LS,Pending,0,300,\n"
    )
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES)
    fleet = load_fleet(str(nodes))
    requests, true_s, kind = load_workload(pods, fleet, DEFAULT_ESTIMATE, {Tier.ON_DEMAND: 1.0}, 0)
    assert [r.id for r in requests] == ["p0"] and true_s == [100.0]
    assert requests[0].submitted_at_s == 0 and "1 never scheduled" in kind


def test_a_pod_time_that_is_not_a_finite_number_names_its_line(tmp_path: Path):
    from suanli.domain.errors import FleetError
    from suanli.sim.traces import read_openb_pods

    path = tmp_path / "pods.csv"
    path.write_text(POD_HEADER + "\np0,4000,1024,1,1000,,LS,Running,0,nan,0\n")
    with pytest.raises(FleetError, match=r"pods\.csv:2") as error:
        read_openb_pods(path)
    assert error.value.field == "deletion_time"


@pytest.mark.parametrize("column", ["creation_time", "scheduled_time", "deletion_time"])
def test_a_pod_file_without_a_time_column_is_told_so(tmp_path: Path, column: str):
    """A pod file missing one of its times was taken for ITP jobs (its error named ITP's columns), or, without
    `scheduled_time`, read as pods never scheduled ("the trace holds no jobs")."""
    header = POD_HEADER.split(",")
    at = header.index(column)
    row = ["p0", "4000", "1024", "1", "1000", "", "LS", "Succeeded", "0", "500", "400"]
    path = tmp_path / "pods.csv"
    path.write_text(
        ",".join(header[:at] + header[at + 1 :]) + "\n" + ",".join(row[:at] + row[at + 1 :]) + "\n"
    )
    fleet = load_fleet("1:8")
    with pytest.raises(FleetError, match=f"missing columns {column}"):
        load_workload(path, fleet, DEFAULT_ESTIMATE, {Tier.ON_DEMAND: 1.0}, 0)


def test_the_replay_benchmark_draws_tiers_when_asked(tmp_path: Path, capsys):
    """`queue_bench --mix` times a replay where spot is preempted, not only an all on-demand one."""
    from suanli.sim import queue_bench

    template = tmp_path / "template.csv"
    rows = "\n".join(f"{j.job_id},{j.submitted_s:.0f},{j.duration_s:.0f},{j.gpus}" for j in TEMPLATE)
    template.write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    args = ["--jobs", "400", "--gpus", "64", "--load", "1.2", "--template", str(template)]
    report = queue_bench.main([*args, "--mix", "on_demand=0.5,spot=0.5"])
    assert report["completed"] == 400 and report["tier_mix"] == {"on_demand": 0.5, "spot": 0.5}
    assert report["preemptions"] > 0 and set(report["per_tier"]) == {"on_demand", "spot"}
    assert "per_tier" not in queue_bench.main(args)
    with pytest.raises(SystemExit):
        queue_bench.main([*args, "--mix", "gold=1"])


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (["--gpus", "7"], "--gpus 7: a multiple of 8, at least 8"),  # was a ZeroDivisionError
        (["--gpus", "15"], "--gpus 15: a multiple of 8"),  # was 8 GPUs, silently
        (["--gpus", "8"], "the template's widest job takes 64 GPUs"),  # 64-GPU jobs waited forever, unsaid
        (["--load", "nan"], "--load nan"),  # hung: a NaN clock never advances
        (["--load", "0"], "--load 0.0"),
        (["--jobs", "0"], "--jobs 0: at least 1"),
        (["--template", "/no/such.csv"], "--template /no/such.csv: no such file"),
        (["--json", "/"], "--json /: is a directory"),  # was a traceback after the run
    ],
)
def test_the_replay_benchmark_refuses_bad_values_before_replaying(bad: list[str], says: str, capsys) -> None:
    from suanli.sim import queue_bench

    with pytest.raises(SystemExit) as refused:
        queue_bench.main(["--jobs", "10", *bad])
    assert refused.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("times", "says"),
    [
        ("0,,100", "scheduled but never deleted"),  # replayed as a 1-second job
        ("0,50,100", "deleted before it was scheduled"),
        ("200,500,100", "scheduled before it was created"),
        ("-5,500,100", "negative"),
    ],
)
def test_a_pod_whose_times_cannot_be_replayed_is_refused_naming_its_line(
    tmp_path: Path, times: str, says: str
):
    """Such a pod was replayed, without a word, as a job of one second."""
    path = tmp_path / "pods.csv"
    path.write_text(POD_HEADER + f"\np0,4000,1024,1,1000,,LS,Running,{times}\n")
    with pytest.raises(ValueError, match=r"--jobs: .*pods\.csv:2.*" + says):
        queue_command(
            str(path_nodes(tmp_path)), path, ["fifo"], None, None, None, Console(file=io.StringIO())
        )


def path_nodes(tmp_path: Path) -> Path:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES)
    return nodes


def test_the_all_node_file_leaves_its_cpu_only_nodes_out(tmp_path: Path):
    """The trace's all-node CSV (CPU-only nodes beside the GPU ones) failed: "unknown GPU model 'none'"."""
    nodes = tmp_path / "all.csv"
    nodes.write_text(NODES + "cpu-0,96000,786432,0,\n")
    fleet = load_fleet(str(nodes))
    assert "cpu-0" not in {n.name for n in fleet.nodes} and fleet.gpu_count > 0
    only_cpu = tmp_path / "cpu.csv"
    only_cpu.write_text(NODES.splitlines()[0] + "\ncpu-0,96000,786432,0,\n")
    with pytest.raises(ValueError, match=r"--nodes .*no node with a GPU"):
        load_fleet(str(only_cpu))


def test_the_replay_benchmark_writes_json_without_nan_and_names_a_template_that_is_not_itp(
    tmp_path: Path, capsys
) -> None:
    """With no job completed its figures were NaN, which is not JSON; a pod file as template: a traceback."""
    from suanli.sim import queue_bench

    template = tmp_path / "template.csv"
    template.write_text("job_id,submission_time,duration,num_gpu\nj0,0,10,1\n")
    out = tmp_path / "bench.json"
    queue_bench.main(["--jobs", "1", "--gpus", "8", "--template", str(template), "--json", str(out)])
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    pods = tmp_path / "pods.csv"
    pods.write_text(POD_HEADER + "\np0,4000,1024,1,1000,,LS,Running,0,500,100\n")
    with pytest.raises(SystemExit):
        queue_bench.main(["--jobs", "1", "--template", str(pods)])
    assert "not an ITP job CSV" in capsys.readouterr().err


def test_tenants_share_a_replay_by_their_fair_share_weights(tmp_path: Path):
    """`--tenants a=2,b=1` deals an overloaded trace evenly to two tenants: `suanli` (fair share in the walk
    and in backfill) gives a about two thirds of the GPU-time, FIFO about what each asks (a half)."""
    import random

    rng = random.Random(1)
    rows = [f"j{i},{i * 60},{rng.randint(1800, 7200)},{rng.choice([1, 2, 4, 8])}" for i in range(1500)]
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out.json"
    console = Console(file=io.StringIO())
    queue_command("4:8", trace, ["suanli", "fifo"], None, out, None, console, tenants="a=2,b=1")
    shares = {
        name: {t: f["gpu_share_pct"] for t, f in figures["per_tenant"].items()}
        for name, figures in json.loads(out.read_text())["policies"].items()
    }
    assert shares["suanli"]["a"] == pytest.approx(66.7, abs=6), shares
    assert shares["fifo"]["a"] == pytest.approx(50, abs=6), shares
    assert "by tenant" in console.file.getvalue()
    for bad, says in (
        ("a=2", "two tenants or more"),
        ("a=2,a=1", "named once"),
        ("a=0,b=1", "from 0.001 to 1000"),
        ("a=x,b=1", "NAME=WEIGHT"),
    ):
        with pytest.raises(ValueError, match=f"--tenants .*{says}"):
            queue_command("4:8", trace, ["fifo"], None, None, None, console, tenants=bad)


def test_the_progress_bar_grows_with_a_replay_that_runs_past_its_last_arrival_and_run():
    """Its total is the last arrival plus its run time; a replay whose queue runs past that stretched the
    bar to 100% and kept it there: the total now follows the virtual clock."""
    with Progress(console=Console(file=io.StringIO())) as progress:
        advance = days_bar(progress, "suanli", 2.0, start_s=86400.0)
        advance(86400.0 * 2)
        (task,) = progress.tasks
        assert (task.completed, task.total) == (1.0, 2.0)
        advance(86400.0 * 5)
        assert (task.completed, task.total) == (4.0, 4.0)
