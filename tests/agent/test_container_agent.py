"""An agent that runs rentals in containers, with a stand-in `docker` on PATH (no container engine can run or
be downloaded here): the executor `suanli agent --executor` chooses, the image and GPUs a rental's `docker
run` gets, an image's entrypoint, and an image rental on a host-process agent."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from test_runner_lifecycle import FakeClient, eventually, make_runner
from typer.testing import CliRunner

from suanli.agent.attached import Ends
from suanli.agent.containers import ContainerExecutor
from suanli.agent.executor_choice import ExecutorKind, choose_executor
from suanli.agent.executors import ExecutorError, ProcessExecutor, WorkloadSpec
from suanli.agent.orphans import adopt, find_orphans
from suanli.agent.probe import declared_gpu_uuid
from suanli.agent.runner import AgentRunner
from suanli.cli.main import app
from suanli.wire.agent_schemas import AssignmentResponse
from suanli.wire.schemas import SliceResponse

FAKE_RUNTIME = Path(__file__).parent / "fixtures" / "fake_container_runtime.py"
PYTORCH = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"


def install_runtime(bin_dir: Path, name: str = "docker") -> Path:
    """The stand-in runtime as `bin_dir/name`, run by this interpreter."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    runtime = bin_dir / name
    runtime.write_text(f"#!{sys.executable}\n" + FAKE_RUNTIME.read_text())
    runtime.chmod(0o755)
    return runtime


def calls(bin_dir: Path) -> list[list[str]]:
    path = bin_dir / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def runtime_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH with the stand-in `docker` first, then the system's programs; the directory holding it."""
    bin_dir = tmp_path / "bin"
    install_runtime(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def run_one(tmp_path: Path, response: AssignmentResponse, executor=None) -> tuple[AgentRunner, FakeClient]:
    """One agent step that starts `response`, then steps until its workload's end is reported."""
    client = FakeClient()
    client.assignments = [response]
    runner = make_runner(tmp_path / "agent", client)
    if executor is not None:
        runner.executor = executor
    runner.step()
    eventually(lambda: runner.step() or runner.local[response.rental_id].state != "running")
    runner.step()
    return runner, client


def assignment(image: str | None, command: list[str], gpus=(2, 3)) -> AssignmentResponse:
    return AssignmentResponse(
        rental_id="r-1",
        action="run",
        slices=[SliceResponse(gpu_index=i, milli=1000, memory_mib=81920) for i in gpus],
        command=command,
        env={},
        image=image,
    )


def test_a_rental_with_a_catalogue_image_runs_in_it_with_exactly_its_gpus(
    tmp_path: Path, runtime_on_path: Path
) -> None:
    executor = choose_executor(ExecutorKind.AUTO, tmp_path / "agent")
    assert isinstance(executor, ContainerExecutor)
    show = ["sh", "-c", 'echo "CVD=$CUDA_VISIBLE_DEVICES"']
    _, client = run_one(tmp_path, assignment("pytorch", show), executor)
    uuids = ",".join(declared_gpu_uuid("h100-a-01", i) for i in (2, 3))
    (run,) = [argv for argv in calls(runtime_on_path) if argv[1] == "run"]
    assert run[run.index("--gpus") + 1] == f'"device={uuids}"'
    assert run[-4:] == [PYTORCH, *show], "the catalogue key did not resolve to its pinned image"
    assert f"CUDA_VISIBLE_DEVICES={uuids}" in run
    assert [(w.state, w.exit_code) for w in client.reports[-1]] == [("succeeded", 0)]
    shipped = client.logs["r-1"].decode()
    assert f"image={PYTORCH}" in shipped and f"CVD={uuids}" in shipped
    assert set(client.runs_images) == {True}, "a container agent must tell the server it runs images"


def test_a_rental_with_an_image_and_no_command_runs_the_images_entrypoint(
    tmp_path: Path, runtime_on_path: Path
) -> None:
    """Not a reservation that only holds GPUs: the image has a program of its own."""
    executor = choose_executor(ExecutorKind.CONTAINER, tmp_path / "agent")
    _, client = run_one(tmp_path, assignment("vllm", []), executor)
    (run,) = [argv for argv in calls(runtime_on_path) if argv[1] == "run"]
    assert run[-1] == "vllm/vllm-openai:v0.6.3"
    assert "runs its entrypoint" in client.logs["r-1"].decode()
    assert [(w.state, w.exit_code) for w in client.reports[-1]] == [("succeeded", 0)]


def test_a_rental_without_an_image_on_a_container_agent_runs_in_the_default_image(
    tmp_path: Path, runtime_on_path: Path
) -> None:
    executor = choose_executor(ExecutorKind.CONTAINER, tmp_path / "agent")
    run_one(tmp_path, assignment(None, ["true"]), executor)
    (run,) = [argv for argv in calls(runtime_on_path) if argv[1] == "run"]
    assert run[-2:] == [PYTORCH, "true"]


def test_an_image_rental_on_a_host_process_agent_fails_saying_why_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran-on-the-host"
    runner, client = run_one(tmp_path, assignment("pytorch", ["touch", str(marker)]))
    assert isinstance(runner.executor, ProcessExecutor)
    (report,) = client.reports[-1]
    assert report.state == "failed"
    assert "runs workloads as host processes and cannot run image 'pytorch'" in report.message
    assert "--executor container" in report.message
    assert not marker.exists(), "the command meant for a container ran on the host"
    assert set(client.runs_images) == {False}, "a host-process agent must tell the server it runs no images"


def test_auto_is_the_host_process_executor_without_a_runtime_and_container_needs_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert isinstance(choose_executor(ExecutorKind.AUTO, tmp_path), ProcessExecutor)
    with pytest.raises(ExecutorError, match="no docker or podman on PATH"):
        choose_executor(ExecutorKind.CONTAINER, tmp_path)


def test_the_runtime_named_is_the_one_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    install_runtime(bin_dir, "docker")
    podman = install_runtime(bin_dir, "podman")
    monkeypatch.setenv("PATH", str(bin_dir))
    chosen = choose_executor(ExecutorKind.AUTO, tmp_path, "podman")
    assert isinstance(chosen, ContainerExecutor) and chosen.runtime == str(podman)
    assert choose_executor(ExecutorKind.CONTAINER, tmp_path).runtime == str(bin_dir / "docker")
    with pytest.raises(ExecutorError, match="use docker or podman"):
        choose_executor(ExecutorKind.CONTAINER, tmp_path, "containerd")
    with pytest.raises(ExecutorError, match="not process"):
        choose_executor(ExecutorKind.PROCESS, tmp_path, "docker")


def test_suanli_agent_refuses_the_container_executor_without_a_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    fleet = Path(__file__).parents[2] / "examples" / "fleet.toml"
    args = ["agent", "--server", "http://127.0.0.1:9", "--declared", str(fleet), "--node", "h100-a-01"]
    result = CliRunner().invoke(app, [*args, "--work-dir", str(tmp_path), "--executor", "container"])
    assert result.exit_code == 2, result.output
    assert "--executor container: no docker or podman on PATH" in " ".join(result.output.split())


def container_pid(bin_dir: Path, name: str) -> int:
    """The pid of the stand-in runtime's running container `name`, once it has started."""
    pid_file = bin_dir / "containers" / name
    eventually(pid_file.exists)
    return int(pid_file.read_text())


def container_running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def launch_sleeper(tmp_path: Path, bin_dir: Path) -> tuple[ContainerExecutor, object, int]:
    executor = ContainerExecutor(tmp_path / "agent", runtime=str(bin_dir / "docker"))
    workload = executor.launch(WorkloadSpec("r-1", ("sleep", "60"), {}, image="pytorch"))
    return executor, workload, container_pid(bin_dir, "suanli-r-1")


def test_stopping_a_container_workload_kills_and_removes_its_container(
    tmp_path: Path, runtime_on_path: Path
) -> None:
    _, workload, pid = launch_sleeper(tmp_path, runtime_on_path)
    try:
        workload.stop(0.2)  # type: ignore[attr-defined]
        eventually(lambda: not container_running(pid))
        control = [argv[1:] for argv in calls(runtime_on_path) if argv[1] != "run"]
        assert control == [
            ["stop", "--time", "0", "suanli-r-1"],
            ["kill", "--signal", "KILL", "suanli-r-1"],
            ["rm", "--force", "suanli-r-1"],
        ]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_killing_an_adopted_container_workload_ends_its_container_not_only_its_client(
    tmp_path: Path, runtime_on_path: Path
) -> None:
    """The container runs apart from its `docker run` client (as under a real engine): killing the client's
    process group, all an adopted workload used to do, left it running."""
    executor, _, pid = launch_sleeper(tmp_path, runtime_on_path)
    try:
        orphan = find_orphans(tmp_path / "agent")["r-1"]
        assert orphan.alive
        adopt("r-1", orphan, executor).kill()
        eventually(lambda: not container_running(pid))
        control = [argv[1:] for argv in calls(runtime_on_path) if argv[1] != "run"]
        assert control == [["kill", "--signal", "KILL", "suanli-r-1"], ["rm", "--force", "suanli-r-1"]]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("tty", "flags"), [(True, ["-i", "-t", "--env", "TERM=xterm-256color"]), (False, ["-i"])]
)
def test_an_attached_command_in_a_container_gets_its_input_and_a_terminal_from_the_runtime(
    tmp_path: Path, runtime_on_path: Path, tty: bool, flags: list[str]
) -> None:
    """`suanli exec -it` into an image rental is `docker exec -i -t` on the agent's pseudo-terminal."""
    executor, workload, _ = launch_sleeper(tmp_path, runtime_on_path)
    ends = Ends.open(tty)
    try:
        spec = WorkloadSpec("r-1", ("sleep", "60"), {}, image="pytorch")
        process = executor.run_command(spec, ["bash"], 60, tmp_path / "unused.log", ends.child)
        assert process.wait(timeout=10) == 0
        assert ["exec", *flags, "suanli-r-1", "bash"] in [argv[1:] for argv in calls(runtime_on_path)]
    finally:
        ends.close()
        workload.kill()  # type: ignore[attr-defined]


def test_a_containers_ports_are_reached_at_its_address(tmp_path: Path, runtime_on_path: Path) -> None:
    """`suanli port-forward` into an image rental connects to the address `inspect` gives the container."""
    executor, workload, _ = launch_sleeper(tmp_path, runtime_on_path)
    try:
        spec = WorkloadSpec("r-1", ("sleep", "60"), {}, image="pytorch")
        assert executor.address(spec) == "127.0.0.1"  # the stand-in's containers share the host's network
        inspected = [argv[1:] for argv in calls(runtime_on_path) if argv[1] == "inspect"]
        assert inspected == [
            ["inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", "suanli-r-1"]
        ]
    finally:
        workload.kill()  # type: ignore[attr-defined]
