"""End to end with a container runtime: a server on SQLite and a `suanli agent --executor auto` process
whose PATH holds a stand-in `docker` (no container engine can run or be downloaded here; the stand-in runs
the command after the image on the host). A tenant rents with `suanli rent --image pytorch`; the rental's
log shows the image it ran in and the GPUs it was given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_agents import FLEET, SUANLI, Platform, running_platform, wait_for_state, wait_until

from suanli.agent.probe import declared_gpu_uuid

FAKE_RUNTIME = Path(__file__).parents[1] / "agent" / "fixtures" / "fake_container_runtime.py"
PYTORCH = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    runtime = bin_dir / "docker"
    runtime.write_text(f"#!{sys.executable}\n" + FAKE_RUNTIME.read_text())
    runtime.chmod(0o755)
    path = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    executor = ("--executor", "auto")
    with running_platform(tmp_path, FLEET, ["gpu-01"], agent_args=executor, agent_path=path) as p:
        yield p


def cli(platform: Platform, *args: str) -> str:
    env = {**os.environ, "SUANLI_CONFIG_DIR": str(platform.tmp / "cli"), "COLUMNS": "200"}
    result = subprocess.run([*SUANLI, *args], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_rental_with_a_catalogue_image_runs_in_it_on_its_gpus(platform: Platform) -> None:
    cli(platform, "login", platform.url, "--key", platform.tenant_key)
    shows = 'echo "CVD=$CUDA_VISIBLE_DEVICES"'
    rent = ["rent", "H100:2", "--image", "pytorch", "--json", "--", "sh", "-c", shows]
    rented = json.loads(cli(platform, *rent))
    assert rented["request"]["image"] == "pytorch"
    with platform.tenant() as api:
        done = wait_for_state(api, rented["id"], "stopped")
        assert any(e.kind == "stopped" and "exit code 0" in e.message for e in done.events), done.events
        wait_until(lambda: "CVD=" in api.logs(rented["id"]).data, 5, "logs")
    uuids = ",".join(declared_gpu_uuid("gpu-01", i) for i in range(2))
    assert cli(platform, "logs", rented["id"]).splitlines() == [
        f'fake runtime: image={PYTORCH} gpus="device={uuids}"',
        f"CVD={uuids}",
    ]
    assert "workloads run with containers through" in (platform.tmp / "agent-gpu-01.log").read_text()
