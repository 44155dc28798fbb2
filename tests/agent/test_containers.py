"""The container executor's `docker run` / `podman run` argument lists (no container engine runs here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from suanli.agent.containers import run_args
from suanli.agent.executors import ExecutorError, RentalPaths, WorkloadSpec
from suanli.domain.images import FRAMEWORK_IMAGES, resolve_image

PATHS = RentalPaths(Path("/var/lib/suanli/rentals/r-7"))
GPU_A = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
GPU_B = "GPU-1b2c3d4e-0000-4106-c12f-20bd9faed9f6"


def spec(**changes: object) -> WorkloadSpec:
    fields: dict[str, object] = {
        "rental_id": "r-7",
        "command": ("python", "train.py"),
        "env": {
            "CUDA_VISIBLE_DEVICES": f"{GPU_A},{GPU_B}",
            "SUANLI_RENTAL_ID": "r-7",
            "SUANLI_NOTICE_FILE": "x",
        },
        "devices": (GPU_A, GPU_B),
        "image": "pytorch:2.5.1",
    }
    fields.update(changes)
    return WorkloadSpec(**fields)  # type: ignore[arg-type]


def test_docker_run_arguments() -> None:
    assert run_args("docker", spec(), PATHS) == [
        "docker", "run", "--rm", "--init", "--name", "suanli-r-7",
        "--label", "suanli.managed=true", "--label", "suanli.rental=r-7",
        "--gpus", f'"device={GPU_A},{GPU_B}"',
        "--volume", "/var/lib/suanli/rentals/r-7/work:/workspace", "--workdir", "/workspace",
        "--volume", "/var/lib/suanli/rentals/r-7/control:/run/suanli:ro",
        "--env", f"CUDA_VISIBLE_DEVICES={GPU_A},{GPU_B}",
        "--env", "SUANLI_NOTICE_FILE=/run/suanli/notice.json",
        "--env", "SUANLI_RENTAL_ID=r-7",
        "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "python", "train.py",
    ]  # fmt: skip


def test_a_multi_node_rentals_nodes_file_is_the_mounted_one() -> None:
    env = {**spec().env, "SUANLI_NODES_FILE": "/var/lib/suanli/rentals/r-7/control/nodes.json"}
    args = run_args("docker", spec(env=env), PATHS)
    assert "SUANLI_NODES_FILE=/run/suanli/nodes.json" in args


def test_podman_gets_one_cdi_device_per_uuid() -> None:
    args = run_args("/usr/bin/podman", spec(), PATHS)
    assert args[:2] == ["/usr/bin/podman", "run"]
    assert "--gpus" not in args
    devices = [args[i + 1] for i, arg in enumerate(args) if arg == "--device"]
    assert devices == [f"nvidia.com/gpu={GPU_A}", f"nvidia.com/gpu={GPU_B}"]


def test_a_share_reaches_the_hosts_mps_daemon() -> None:
    env = {"CUDA_VISIBLE_DEVICES": GPU_A, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"}
    args = run_args("docker", spec(env=env, devices=(GPU_A,)), PATHS)
    assert args[12:16] == ["--ipc", "host", "--volume", "/tmp/nvidia-mps:/tmp/nvidia-mps"]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in args


def test_ascend_or_amd_devices_are_refused_not_run_without_them() -> None:
    """`--gpus` and CDI's nvidia.com/gpu name NVIDIA devices: an Ascend rental would run with none."""
    env = {"ASCEND_RT_VISIBLE_DEVICES": "0,1", "SUANLI_RENTAL_ID": "r-7"}
    with pytest.raises(ExecutorError, match="NVIDIA GPUs only"):
        run_args("docker", spec(env=env), PATHS)


def test_no_devices_means_no_gpu_flags_and_an_image_is_required() -> None:
    args = run_args("docker", spec(devices=(), image="ubuntu:24.04"), PATHS)
    assert "--gpus" not in args and "ubuntu:24.04" in args
    with pytest.raises(ExecutorError, match="needs an image"):
        run_args("docker", spec(image=None), PATHS)


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("pytorch", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"),
        ("pytorch:2.4.1", "pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime"),
        ("tensorflow", "tensorflow/tensorflow:2.17.0-gpu"),
        ("jax", "nvcr.io/nvidia/jax:24.04-py3"),
        ("vllm", "vllm/vllm-openai:v0.6.3"),
        ("ghcr.io/acme/trainer:1.2", "ghcr.io/acme/trainer:1.2"),
    ],
    ids=lambda value: value,
)
def test_catalogue_keys_resolve_and_other_references_pass_through(name: str, reference: str) -> None:
    assert resolve_image(name) == reference


def test_every_catalogue_image_is_pinned_and_sourced() -> None:
    for image in FRAMEWORK_IMAGES:
        assert ":" in image.reference and not image.reference.endswith(":latest")
        assert image.source
