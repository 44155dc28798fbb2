"""Running workloads as containers through the docker or podman CLI: `ContainerExecutor` and its parts.

`ContainerExecutor` builds a `docker run` / `podman run` argument list (`run_args`) and runs the attached CLI
as the workload's process, under the same supervisor as a process workload (`executors.spawn`; its exit code
is the container's); signals go to the container by name (`container_name`: `suanli-<rental id>`) through
`docker kill --signal` and `docker stop` (`ContainerControl`), and a kill also `docker rm --force`s it, since
the attached client passes no SIGKILL on and a real runtime keeps the container when the client dies; the
runtime is kept in `workload.json`, so an adopted container is stopped the same way. A workload without an
image runs in `DEFAULT_IMAGE`, one without a command runs its image's entrypoint. `find_runtime` looks for
one of `RUNTIMES` on PATH. Its argument list is unit-tested, and its launch with a stand-in runtime program
on PATH; running real containers is not tested here (no container engine in CI, and nothing may be
downloaded).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from suanli.agent.executors import (
    INHERITED_ENV,
    TERMINAL_TYPE,
    Attachment,
    ExecutorError,
    RentalPaths,
    WorkloadSpec,
    WorkloadStatus,
    rental_paths,
    rentals_dir,
    spawn,
    start_command,
    status_of_returncode,
    write_notice,
    write_record,
)
from suanli.domain.images import DEFAULT_IMAGE, resolve_image

RUNTIMES = ("docker", "podman")  # the container CLIs the container executor drives, in lookup order
CLI_TIMEOUT_S = 60.0  # how long one container CLI call (other than `stop`'s grace) may take
CONTAINER_NOTICE_DIR = "/run/suanli"
CONTAINER_WORKDIR = "/workspace"
MPS_PIPE_DIR = "/tmp/nvidia-mps"


class ContainerExecutor:
    """Workloads as containers through the docker or podman CLI (the attached client is the local process).
    A rental that names no image runs in `default_image` (the catalogue's newest PyTorch): a container agent
    never runs a tenant's command on the host."""

    runs_images = True

    def __init__(self, base: Path, runtime: str | None = None, default_image: str = DEFAULT_IMAGE) -> None:
        self.base = base
        self.runtime = runtime or find_runtime()
        if self.runtime is None:
            raise ExecutorError("no container runtime: neither docker nor podman is on PATH")
        self.default_image = default_image

    def paths(self, rental_id: str) -> RentalPaths:
        return rental_paths(self.base, rental_id)

    @property
    def rentals_dir(self) -> Path:
        return rentals_dir(self.base)

    def launch(self, spec: WorkloadSpec) -> ContainerWorkload:
        spec = replace(spec, image=spec.image or self.default_image)
        paths = self.paths(spec.rental_id)
        paths.create()
        paths.notice_file.unlink(missing_ok=True)
        args = run_args(self.runtime or "docker", spec, paths)
        process = spawn(args, {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}, paths)
        write_record(paths, process.pid, spec, runtime=self.runtime or "docker")
        return ContainerWorkload(spec.rental_id, process, paths, self.runtime or "docker")

    def prepare(self, spec: WorkloadSpec) -> None:
        raise ExecutorError(
            f"rental {spec.rental_id} runs nothing here, and this node runs commands only in a rental's "
            "container: rent it with a command that keeps running (e.g. -- sleep infinity) to exec into it"
        )

    def address(self, spec: WorkloadSpec) -> str:
        """The container's address on its network (`inspect`); the host's when it has none of its own
        (`--network host`)."""
        name = container_name(spec.rental_id)
        template = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
        try:
            done = subprocess.run(
                [self.runtime or "docker", "inspect", "--format", template, name],
                capture_output=True,
                text=True,
                check=False,
                timeout=CLI_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ExecutorError(f"cannot inspect container {name}: {error}") from None
        if done.returncode != 0:
            raise ExecutorError(f"cannot inspect container {name}: {done.stderr.strip()[:200]}")
        addresses = done.stdout.split()
        return addresses[0] if addresses else "127.0.0.1"

    def run_command(
        self,
        spec: WorkloadSpec,
        command: Sequence[str],
        timeout_s: int,
        output: Path,
        attach: Attachment | None = None,
    ) -> subprocess.Popen[bytes]:
        """`command` in the rental's container (`docker exec`: its user, environment and working directory;
        attached, `-i`, and `-t` on a terminal). The image may have no `timeout`, so the limit is the
        agent's: it kills the exec client at `timeout_s`, and a command the client leaves behind in the
        container ends with the container."""
        flags = (
            [] if attach is None else ["-i", "-t", "--env", f"TERM={TERMINAL_TYPE}"] if attach.tty else ["-i"]
        )
        argv = [self.runtime or "docker", "exec", *flags, container_name(spec.rental_id), *command]
        env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
        return start_command(argv, env, output, attach)


class ContainerWorkload:
    """A container this agent started: signals go to the container through the runtime CLI (the attached
    client does not pass SIGKILL on, and a real runtime keeps the container when the client dies), then the
    client's process group is killed."""

    def __init__(
        self, rental_id: str, process: subprocess.Popen[bytes], paths: RentalPaths, runtime: str
    ) -> None:
        self.rental_id = rental_id
        self._process = process
        self.paths = paths
        self._container = ContainerControl(runtime, container_name(rental_id))

    @property
    def pid(self) -> int:
        return self._process.pid

    def poll(self) -> WorkloadStatus:
        return status_of_returncode(self._process.poll())

    def notice(self, deadline: datetime, cause: str | None = None) -> None:
        write_notice(self.paths.notice_file, self.rental_id, deadline, cause=cause)
        self._container.signal("TERM")

    def stop(self, grace_s: float) -> WorkloadStatus:
        self._container.stop(grace_s)
        return self.kill()

    def kill(self) -> WorkloadStatus:
        self._container.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        return self.poll()


@dataclass(frozen=True, slots=True)
class ContainerControl:
    """A rental's container by name through the docker/podman CLI: for a workload this agent started and for
    one an earlier agent process left (adopted). Failures (a container already gone) are ignored."""

    runtime: str
    name: str

    def signal(self, signal_name: str) -> None:
        self._cli(["kill", "--signal", signal_name, self.name], CLI_TIMEOUT_S)

    def stop(self, grace_s: float) -> None:
        """`stop`: SIGTERM, up to `grace_s` to end, then SIGKILL (by the runtime)."""
        grace = max(0, round(grace_s))
        self._cli(["stop", "--time", str(grace), self.name], grace + CLI_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL the container and remove it (`--rm` alone is not enough when its client died first)."""
        self.signal("KILL")
        self._cli(["rm", "--force", self.name], CLI_TIMEOUT_S)

    def _cli(self, args: list[str], timeout_s: float) -> None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([self.runtime, *args], capture_output=True, check=False, timeout=timeout_s)


def run_args(runtime: str, spec: WorkloadSpec, paths: RentalPaths) -> list[str]:
    """The full `docker run` / `podman run` argv for a workload (attached, removed when it ends).

    Devices: docker gets `--gpus "device=UUID,..."` (NVIDIA Container Toolkit; the quotes are part of the
    value because docker splits the flag on commas); podman gets one `--device nvidia.com/gpu=UUID` per device
    (CDI; the host's spec must name devices by UUID: `nvidia-ctk cdi generate --device-name-strategy=uuid`).
    The notice file is mounted at /run/suanli/notice.json and SUANLI_NOTICE_FILE points there; shares also
    get `--ipc host` and the MPS pipe directory so the client reaches the host's MPS daemon.
    """
    if not spec.image:
        raise ExecutorError(f"rental {spec.rental_id}: the container executor needs an image")
    name = container_name(spec.rental_id)
    args = [runtime, "run", "--rm", "--init", "--name", name]
    labels = {"suanli.rental": spec.rental_id, "suanli.managed": "true", **spec.labels}
    for key, value in sorted(labels.items()):
        args += ["--label", f"{key}={value}"]
    if spec.devices and "CUDA_VISIBLE_DEVICES" not in spec.env:
        raise ExecutorError(
            f"rental {spec.rental_id}: containers are given NVIDIA GPUs only (NVIDIA Container Toolkit or "
            "CDI); run AMD and Ascend rentals with the process executor"
        )
    if spec.devices:
        if Path(runtime).name == "podman":
            for device in spec.devices:
                args += ["--device", f"nvidia.com/gpu={device}"]
        else:
            args += ["--gpus", f'"device={",".join(spec.devices)}"']
    env = dict(spec.env)
    env["SUANLI_NOTICE_FILE"] = f"{CONTAINER_NOTICE_DIR}/{paths.notice_file.name}"
    if "SUANLI_NODES_FILE" in env:
        env["SUANLI_NODES_FILE"] = f"{CONTAINER_NOTICE_DIR}/{paths.nodes_file.name}"
    if "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in env:
        args += ["--ipc", "host", "--volume", f"{MPS_PIPE_DIR}:{MPS_PIPE_DIR}"]
    args += ["--volume", f"{paths.workdir}:{CONTAINER_WORKDIR}", "--workdir", CONTAINER_WORKDIR]
    args += ["--volume", f"{paths.control_dir}:{CONTAINER_NOTICE_DIR}:ro"]
    for key, value in sorted(env.items()):
        args += ["--env", f"{key}={value}"]
    args.append(resolve_image(spec.image))
    args += list(spec.command)
    return args


def container_name(rental_id: str) -> str:
    return f"suanli-{rental_id}"


def find_runtime(names: Sequence[str] = RUNTIMES) -> str | None:
    """The first of `names` (docker, then podman) found on PATH, as its path; None when none is."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None
