"""The `suanli` command through Typer's runner: tables, JSON keys, errors that name the input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from suanli.cli import demo
from suanli.cli.main import app
from suanli.config import Settings
from suanli.sim import throughput

EXAMPLE_FLEET = Path(__file__).resolve().parents[2] / "examples" / "fleet.toml"
runner = CliRunner()


@pytest.fixture
def tiny_trace(tmp_path: Path) -> tuple[Path, Path]:
    """A 12-node cluster and a pod list with whole, shared, multi-GPU and CPU-only pods (openb columns)."""
    nodes = tmp_path / "nodes.csv"
    rows = ["sn,cpu_milli,memory_mib,gpu,model"]
    rows += [
        f"n{i:02d},{32000 if i % 3 else 96000},262144,{8 if i % 3 == 0 else 2},{'G2' if i % 3 == 0 else 'T4'}"
        for i in range(12)
    ]
    nodes.write_text("\n".join(rows) + "\n")
    pods = tmp_path / "pods.csv"
    header = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time"
    )
    shapes = [
        (4000, 1, 500),
        (8000, 1, 1000),
        (12000, 1, 250),
        (16000, 2, 1000),
        (8000, 0, 0),
        (32000, 8, 1000),
    ]
    lines = [header] + [
        f"p{i:03d},{cpu},1024,{gpus},{milli},,LS,Running,{i},{i + 100},{i}"
        for i, (cpu, gpus, milli) in enumerate(shapes * 5)
    ]
    pods.write_text("\n".join(lines) + "\n")
    return nodes, pods


def test_packing_prints_a_table_and_writes_the_documented_json_keys(tiny_trace, tmp_path: Path) -> None:
    nodes, pods = tiny_trace
    out = tmp_path / "packing.json"
    result = runner.invoke(
        app,
        [
            "sim",
            "packing",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "all",
            "--seeds",
            "1-2",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Unallocated GPU %" in result.output
    report = json.loads(out.read_text())
    assert report["capacity_gpus"] == 4 * 8 + 8 * 2
    assert set(report["policies"]) == {"random", "best-fit", "fgd", "suanli"}
    for figures in report["policies"].values():
        assert set(figures["unallocated_pct"]) == {"90", "95", "100", "110", "120", "130"}
        assert all(0.0 <= v <= 100.0 for v in figures["unallocated_pct"].values())
        assert figures["placements_per_s"] > 0
        assert "frag_rate_pct_90" in figures


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "tetris"], "unknown policy"),
        (["--seeds", "a-b"], "bad seed range"),
        (
            ["--json", "/proc/packing.json"],
            "--json /proc/packing.json: cannot write in its folder",
        ),  # at once
        (["--json", "/"], "--json /: is a directory"),
    ],
    ids=["unknown-policy", "bad-seeds", "json-unwritable", "json-directory"],
)
def test_packing_rejects_bad_options_by_name(tiny_trace, args: list[str], message: str) -> None:
    nodes, pods = tiny_trace
    result = runner.invoke(app, ["sim", "packing", "--nodes", str(nodes), "--pods", str(pods), *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


@pytest.mark.parametrize("which", ["--nodes", "--pods"])
def test_packing_says_a_file_that_is_not_text_is_not_a_csv_naming_it(
    tiny_trace, tmp_path: Path, which: str
) -> None:
    nodes, pods = tiny_trace
    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(128, 256)) * 4)
    given = {"--nodes": nodes, "--pods": pods, which: binary}
    result = runner.invoke(
        app, ["sim", "packing", "--nodes", str(given["--nodes"]), "--pods", str(given["--pods"])]
    )
    said = " ".join(result.output.split())  # a long path wraps
    assert result.exit_code == 2 and "Traceback" not in said, said
    assert "binary.csv: not a text (UTF-8) CSV file" in said


def test_the_throughput_bench_refuses_a_json_path_it_cannot_write_before_it_runs(capsys) -> None:
    with pytest.raises(SystemExit) as refused:
        throughput.main(["--requests", "10", "--nodes", "2", "--json", "/proc/throughput.json"])
    assert refused.value.code == 2
    assert "--json /proc/throughput.json: cannot write in its folder" in capsys.readouterr().err


def test_packing_names_the_file_and_column_of_a_bad_row(tiny_trace, tmp_path: Path) -> None:
    nodes, pods = tiny_trace
    broken = tmp_path / "broken.csv"
    broken.write_text(nodes.read_text().replace("n03,96000", "n03,many"))
    result = runner.invoke(
        app, ["sim", "packing", "--nodes", str(broken), "--pods", str(pods), "--seeds", "1"]
    )
    assert result.exit_code == 2
    assert "broken.csv:5" in result.output
    assert "cpu_milli" in result.output


def test_fleet_check_summarises_the_example() -> None:
    result = runner.invoke(app, ["fleet", "check", str(EXAMPLE_FLEET)])
    assert result.exit_code == 0, result.output
    assert "20 nodes, 136 GPUs" in result.output


def test_fleet_check_prints_its_summary_as_json_for_scripts() -> None:
    """README: commands that print a result take --json; `fleet check` refused it ("No such option")."""
    result = runner.invoke(app, ["fleet", "check", str(EXAMPLE_FLEET), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["nodes"], summary["gpus"]) == (20, 136)
    assert [r["name"] for r in summary["regions"]] == ["cn-north", "eu-west", "ap-southeast"]
    assert sum(r["gpus"] for r in summary["regions"]) == sum(m["gpus"] for m in summary["models"]) == 136
    assert {"model": "A100-80GB", "mode": "mig", "nodes": 4, "gpus": 32} in summary["models"]


def test_fleet_check_names_file_node_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE_FLEET.read_text().replace("cpu_milli = 224000", 'cpu_milli = "lots"', 1))
    result = runner.invoke(app, ["fleet", "check", str(bad)])
    assert result.exit_code == 2
    assert "bad.toml" in result.output
    assert "h100-a-{i}" in result.output
    assert "cpu_milli" in result.output


@pytest.mark.parametrize("number", ["nan", "inf", "-nan"])
@pytest.mark.parametrize("field", ["pue", "grid_gco2_per_kwh"])
def test_fleet_check_refuses_a_number_that_is_not_finite_naming_the_field(
    tmp_path: Path, field: str, number: str
) -> None:
    """TOML's `nan` passed "at least 1" (no comparison with NaN is true): every invoice in the region then
    had null energy totals, against its own schema."""
    bad = tmp_path / "bad.toml"
    fleet = EXAMPLE_FLEET.read_text()
    bad.write_text(re.sub(rf"(?m)^{field} = .*$", f"{field} = {number}", fleet, count=1))
    result = runner.invoke(app, ["fleet", "check", str(bad)])
    assert result.exit_code == 2, result.output
    assert f"regions.cn-north.{field}" in result.output and "finite" in result.output, result.output


@pytest.mark.parametrize(
    ("field", "number", "bound"), [("pue", "1e308", "3"), ("grid_gco2_per_kwh", "2000.5", "2000")]
)
def test_fleet_check_refuses_a_number_above_its_bound_naming_the_field_and_the_bound(
    tmp_path: Path, field: str, number: str, bound: str
) -> None:
    """`pue = 1e308` passed the check (it is finite and at least 1)."""
    bad = tmp_path / "big.toml"
    bad.write_text(re.sub(rf"(?m)^{field} = .*$", f"{field} = {number}", EXAMPLE_FLEET.read_text(), count=1))
    result = runner.invoke(app, ["fleet", "check", str(bad)])
    assert result.exit_code == 2, result.output
    shown = " ".join(result.output.split())  # Rich wraps long lines
    assert f"regions.cn-north.{field}" in shown and f"must be at most {bound}," in shown, result.output


def test_rent_refuses_an_image_that_is_not_a_reference_naming_the_option() -> None:
    """Checked before anything is sent (no server here): exit 2, the option named, the fix suggested."""
    rent = runner.invoke(app, ["rent", "H100:1", "--image", "ghcr.io/Acme/trainer:1", "--", "python", "t.py"])
    assert rent.exit_code == 2, rent.output
    shown = " ".join(rent.output.split())  # Rich wraps long lines
    assert "--image: 'ghcr.io/Acme/trainer:1': repository names are lowercase" in shown
    assert "did you mean 'ghcr.io/acme/trainer:1'" in shown


def test_show_says_a_rental_is_elastic_and_how_much_of_its_size_it_holds() -> None:
    from datetime import UTC, datetime

    from rich.console import Console

    from suanli.cli.platform_commands import _rental_detail
    from suanli.wire.schemas import NodeAllocationResponse, RentalCreateRequest, RentalResponse, SliceResponse

    def slices(count: int) -> list[SliceResponse]:
        return [SliceResponse(gpu_index=i, milli=1000, memory_mib=81920) for i in range(count)]

    elastic = RentalResponse(
        id="rnt_1",
        tenant_id="ten_1",
        state="running",
        request=RentalCreateRequest(gpu_model="H100", gpus=8, min_gpus=4),
        allocation=[NodeAllocationResponse(node="h100-a-01", cpu_milli=0, memory_mib=0, slices=slices(4))],
        created_at=datetime(2026, 12, 5, tzinfo=UTC),
    )
    whole = elastic.model_copy(
        update={
            "allocation": [
                NodeAllocationResponse(node="h100-a-01", cpu_milli=0, memory_mib=0, slices=slices(8))
            ]
        }
    )
    trimmed = whole.model_copy(
        update={
            "state": "preempting",
            "preempted_by": "another_tenant",
            "notice_deadline": datetime(2026, 12, 5, 1, 2, 3, tzinfo=UTC),
            "notice_keeps_gpus": 4,
        }
    )
    shown = []
    for rental in (elastic, whole, trimmed):
        console = Console(record=True, width=240)
        console.print(_rental_detail(rental))
        shown.append(console.export_text().splitlines()[0])
    assert shown[0].endswith("elastic from 4 GPUs (holds 4 of 8; grows as GPUs free)"), shown[0]
    assert shown[1].endswith("elastic from 4 GPUs"), shown[1]
    assert shown[2].endswith(
        "preempted in part by a higher-tier rental of another tenant until 2026-12-05 01:02:03 UTC "
        "(then runs on 4 GPUs)"
    ), shown[2]


def test_rent_refuses_a_least_size_below_one_naming_the_option() -> None:
    rent = runner.invoke(app, ["rent", "H100:8", "--min-gpus", "0", "--", "python", "t.py"])
    assert rent.exit_code == 2, rent.output
    assert "--min-gpus: Input should be greater than or equal to 1" in " ".join(rent.output.split())


def test_the_demo_box_gives_the_operator_key_and_an_operator_command(tmp_path: Path) -> None:
    panel, commands = demo._banner(
        "http://127.0.0.1:8080", "sk_tenant", "sk_admin", tmp_path / "p.json", 20, tmp_path, "admin mig m1"
    )
    assert "sk_tenant" in panel.renderable and "admin key[/bold]   sk_admin" in panel.renderable
    assert any(line.startswith("  SUANLI_API_KEY=sk_admin ") and "admin mig m1" in line for line in commands)


def test_a_followed_rentals_exit_status_is_its_workloads_as_a_shell_gives_it() -> None:
    from suanli.cli.follow import exit_status

    assert [exit_status(code) for code in (1, 3, 255)] == [1, 3, 255]
    assert exit_status(-9) == 137 and exit_status(-15) == 143  # killed by SIGKILL, SIGTERM
    assert exit_status(256) == 1 and exit_status(-(2**31)) == 1  # no shell status says these


def test_a_followed_rental_waiting_says_why() -> None:
    from datetime import UTC, datetime

    from suanli.cli.follow import _state_line
    from suanli.wire.schemas import RentalCreateRequest, RentalEventResponse, RentalResponse

    at = datetime(2026, 12, 2, tzinfo=UTC)
    why = "no matching node has 9 GPUs (at most 8 on one node): ask for 8 or fewer per node, on more nodes"
    rental = RentalResponse(
        id="rnt_1",
        tenant_id="ten_1",
        state="pending",
        request=RentalCreateRequest(gpu_model="H100", gpus=9),
        allocation=[],
        pending_reason="no_matching_gpu",
        created_at=at,
        events=[
            RentalEventResponse(at=at, kind="created"),
            RentalEventResponse(at=at, kind="pending", message=why),
        ],
    )
    assert _state_line(rental) == f"rnt_1: pending (no_matching_gpu: {why})"
    assert _state_line(rental.model_copy(update={"events": []})) == "rnt_1: pending (no_matching_gpu)"
    live = rental.model_copy(  # the message as the last cycle wrote it, and the start it was promised
        update={"pending_message": "GPU quota 10 GPUs, 8 in use, asks 4", "expected_start_at": at}
    )
    said = "rnt_1: pending (no_matching_gpu: GPU quota 10 GPUs, 8 in use, asks 4), starts by 2026-12-02 00:00"
    said += " UTC"
    assert _state_line(live) == said


def test_show_says_a_rental_checkpoints_and_when_it_runs_on_borrowed_gpus() -> None:
    from datetime import UTC, datetime

    from rich.console import Console

    from suanli.cli.platform_commands import _rental_detail
    from suanli.wire.schemas import RentalCreateRequest, RentalResponse

    at = datetime(2026, 12, 4, tzinfo=UTC)
    plain = RentalResponse(
        id="rnt_1",
        tenant_id="ten_1",
        state="running",
        request=RentalCreateRequest(gpu_model="H100", gpus=8),
        allocation=[],
        created_at=at,
    )
    saving = plain.model_copy(
        update={"request": RentalCreateRequest(gpu_model="H100", gpus=8, checkpoints=True)}
    )
    lent = saving.model_copy(update={"borrowed": True})
    shown = []
    for rental in (plain, saving, lent):
        console = Console(record=True, width=200)
        console.print(_rental_detail(rental))
        shown.append(console.export_text().splitlines()[0])
    assert "checkpoints" not in shown[0] and "borrowed" not in shown[0]
    assert shown[1].endswith("on_demand, checkpoints") and "borrowed" not in shown[1]
    assert "checkpoints (on borrowed GPUs: taken back with notice" in shown[2]


def test_follow_knows_the_reasons_no_free_capacity_cures() -> None:
    from suanli.cli.follow import NEVER_FITS, never_fits_hint
    from suanli.domain.queueing import NEVER_FITS as DOMAIN_NEVER_FITS

    assert frozenset(reason.value for reason in DOMAIN_NEVER_FITS) == NEVER_FITS
    assert "suanli stop rnt_1" in never_fits_hint("rnt_1")


def test_the_readmes_port_forward_example_names_what_the_sdk_has() -> None:
    """The snippet runs until its forward ends (the e2e tests run the same calls); here it compiles and
    every SDK name it uses exists, with the arguments it passes."""
    import ast
    import inspect

    from suanli.client import Client
    from suanli.client.forward import Forwarder

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("A port forward from a script", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    tree = ast.parse(snippet)
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert {"forward", "attach_exec", "rental_gpu_history"} <= called
    for name in ("forward", "attach_exec", "rental_gpu_history"):
        assert callable(getattr(Client, name))
    inspect.signature(Client.rental_gpu_history).bind(None, "rnt_x", minutes=30)
    inspect.signature(Forwarder).bind(None, None, on_error=print)


def test_show_numbers_the_runs_of_a_rental_placed_again_and_only_then() -> None:
    from datetime import UTC, datetime

    from rich.console import Console
    from rich.console import Group as RichGroup

    from suanli.cli.platform_commands import _with_runs
    from suanli.wire.agent_schemas import RentalRunResponse

    at = datetime(2026, 12, 4, tzinfo=UTC)
    first = RentalRunResponse(node="h100-01", state="stopped", started_at=at, ended_at=at, placement=1)
    second = first.model_copy(update={"state": "running", "ended_at": None, "placement": 2})

    def table_of(runs: list[RentalRunResponse]) -> list[str]:
        console = Console(record=True, width=200)
        console.print(_with_runs(RichGroup(), runs))
        lines = console.export_text().splitlines()
        cells = [[cell.strip() for cell in line.strip("┃│ ").replace("┃", "│").split("│")] for line in lines]
        return [" ".join(row) for row in cells if "h100-01" in row or "node" in row]

    header, *rows = table_of([second, first])
    assert header.split()[:2] == ["placement", "node"]
    assert [row.split()[:3] for row in rows] == [["1", "h100-01", "stopped"], ["2", "h100-01", "running"]]
    header, row = table_of([first])
    assert header.split()[0] == "node" and row.split()[:2] == ["h100-01", "stopped"]


def test_following_a_waiting_rental_tells_its_moving_figures_at_most_once_a_minute(
    capsys, monkeypatch
) -> None:
    """`rent -f` said why a rental waits only when the reason changed (from its events), so a quota's figures
    freeing up went unseen; it reads the live message now, and tells it again for the same reason only after
    `RESAY_S` (a spend cap's money moves every cycle), a new reason at once."""
    from datetime import UTC, datetime

    from suanli.cli import follow
    from suanli.wire.schemas import RentalCreateRequest, RentalResponse

    at = datetime(2026, 12, 2, tzinfo=UTC)

    def waiting(reason: str, message: str, state: str = "pending") -> RentalResponse:
        return RentalResponse(
            id="rnt_1",
            tenant_id="ten_1",
            state=state,
            request=RentalCreateRequest(gpu_model="H100", gpus=4),
            allocation=[],
            pending_reason=reason if state == "pending" else None,
            pending_message=message if state == "pending" else None,
            created_at=at,
            events=[],
        )

    polls = [
        waiting("quota", "GPU quota 10 GPUs, 9 in use, asks 4"),  # figures moved: not yet again
        waiting("quota", "GPU quota 10 GPUs, 8 in use, asks 4"),
        waiting("spend_cap", "daily spend cap 5.0000, 4.9000 spent or committed"),  # a new reason: at once
        waiting("spend_cap", "daily spend cap 5.0000, 4.9100 spent or committed"),
        waiting("", "", state="stopped"),
    ]

    class Polled:
        def rental(self, rental_id: str) -> RentalResponse:
            return polls.pop(0) if len(polls) > 1 else polls[0]

        def output(self, rental_id, follow, node, poll_s, on_wait, offset, on_unreachable):
            for _ in range(4):
                on_wait()
            return iter(())

        def rental_runs(self, rental_id: str) -> list:
            return []  # stopped before it ran: no exit code

    monkeypatch.setattr(follow, "RESAY_S", 3600.0)
    first = waiting("quota", "GPU quota 10 GPUs, 10 in use, asks 4")
    assert follow.follow_rental(Polled(), first) == 0  # type: ignore[arg-type]
    told = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rnt_1: pending")]
    assert told == [
        "rnt_1: pending (quota: GPU quota 10 GPUs, 10 in use, asks 4)",
        "rnt_1: pending (spend_cap: daily spend cap 5.0000, 4.9000 spent or committed)",
    ], told


def test_every_command_is_documented() -> None:
    """`admin nodes`, `admin key-create`, `admin key-revoke`, `contracts ls`, `contracts transfer` and
    `webhooks rm` were in no doc: an operator learnt of them only from --help."""
    root = Path(__file__).resolve().parents[2]
    docs = " ".join(
        " ".join(path.read_text().split())
        for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    )
    undocumented = [
        " ".join(path)
        for path in _command_paths(typer.main.get_command(app), ())
        if " ".join(path) not in docs
    ]
    assert undocumented == []


@pytest.mark.parametrize(
    "variable",
    ["SUANLI_URL", "SUANLI_API_KEY", "SUANLI_CONFIG_DIR", "SUANLI_JOIN_TOKEN", "SUANLI_TIMEOUT_S"]
    + [f"SUANLI_{name.upper()}" for name in Settings.model_fields],
)
def test_every_environment_variable_is_documented(variable: str) -> None:
    """The CLI's and agent's variables and the server's settings (SUANLI_POLICY, SUANLI_POLICY_SEED,
    SUANLI_JOIN_TOKEN_TTL_S) were read by the code and named in no doc."""
    root = Path(__file__).resolve().parents[2]
    docs = " ".join(path.read_text() for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    assert re.search(rf"\b{variable}\b", docs), f"{variable} is in no doc"


def _command_paths(command: object, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every runnable command under `command` as its words after `suanli` (a group's own name is not one)."""
    if not hasattr(command, "commands"):  # a group has subcommands (Typer's group is not click's class)
        return [path]
    return [found for name, sub in command.commands.items() for found in _command_paths(sub, (*path, name))]
