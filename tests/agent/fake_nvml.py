"""A recorded NVML: answers pynvml's calls from a JSON fixture of a real host's shape."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

FIXTURES = Path(__file__).parent / "fixtures"


def load_fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


class RecordedNvml:
    NVMLError = pynvml.NVMLError
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE

    def __init__(self, host: dict[str, Any]) -> None:
        self.host = host
        self.initialised = 0

    def nvmlInit(self) -> None:
        if self.host.get("nvml_error") == "library_not_found":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.host["driver_version"]

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.host["cuda_driver_version"]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.host["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        return self.host["devices"][index]

    def nvmlDeviceGetName(self, handle: dict[str, Any]) -> bytes:
        return handle["name"].encode()  # older pynvml answers bytes; the probe must cope

    def nvmlDeviceGetUUID(self, handle: dict[str, Any]) -> str:
        return handle["uuid"]

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(total=handle["memory_total_bytes"], used=handle.get("memory_used_bytes", 0))

    def nvmlDeviceGetUtilizationRates(self, handle: dict[str, Any]) -> SimpleNamespace:
        if "utilization_gpu" not in handle:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=handle["utilization_gpu"], memory=0)

    def nvmlDeviceGetPowerUsage(self, handle: dict[str, Any]) -> int:
        if "power_mw" not in handle:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return handle["power_mw"]

    def nvmlDeviceGetMigMode(self, handle: dict[str, Any]) -> list[int]:
        if handle.get("mig_mode") is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return handle["mig_mode"]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: dict[str, Any]) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: dict[str, Any], index: int) -> dict[str, Any]:
        migs = handle.get("mig_devices", [])
        if index >= len(migs):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return {**migs[index], "parent": handle["uuid"]}

    def nvmlDeviceGetComputeRunningProcesses(self, mig: dict[str, Any]) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=0) for pid in mig.get("processes", [])]

    def nvmlDeviceGetGpuInstanceId(self, mig: dict[str, Any]) -> int:
        return mig["gpu_instance_id"]

    def nvmlDeviceGetGpuInstanceById(self, handle: dict[str, Any], gi_id: int) -> dict[str, Any]:
        return next(m for m in handle["mig_devices"] if m["gpu_instance_id"] == gi_id)

    def nvmlGpuInstanceGetInfo(self, gpu_instance: dict[str, Any]) -> SimpleNamespace:
        placement = SimpleNamespace(start=gpu_instance["placement_start"], size=0)
        return SimpleNamespace(id=gpu_instance["gpu_instance_id"], profileId=0, placement=placement)
