"""GPU discovery on a host: what GPUs and MIG devices it has, by UUID, named as the catalogue names them.

`GpuProbe` is the seam: `NvmlProbe` asks NVML (nvidia-ml-py's `pynvml`, or any object with the same functions,
so tests drive it with recorded hardware answers); `DeclaredProbe` is its fake for hosts without NVML, built
from one node of a fleet TOML with stable, NVIDIA-shaped UUIDs. Both answer a `HostInventory`.

Errors: `ProbeError` (a `SuanliError`) when NVML is missing or fails, or the declared node does not exist.
"""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pynvml

from suanli.agent.mig_setup import NvmlMig, plan_change
from suanli.domain.catalog import Catalog, MigGeometry
from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import SuanliError
from suanli.domain.inventory import GpuMode, Node
from suanli.domain.mig import base_profile, pack_layout
from suanli.sim.fleet_files import read_fleet

MIB = 1024 * 1024
# Namespace of DeclaredProbe's fake UUIDs: uuid5 of "suanli.declared-gpu" in the DNS namespace; never change.
DECLARED_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "suanli.declared-gpu")

# Names as NVML (`nvidia-smi -L`, nvmlDeviceGetName) and npu-smi print them -> catalogue names. Matched after
# case-folding and collapsing whitespace; a name not here is reported as it is.
DEVICE_NAMES: Mapping[str, str] = {
    "tesla t4": "T4",
    "nvidia a10": "A10",
    "nvidia l4": "L4",
    "nvidia l40s": "L40S",
    "nvidia a30": "A30-24GB",
    "nvidia a100-sxm4-40gb": "A100-40GB",
    "nvidia a100-pcie-40gb": "A100-40GB",
    "nvidia a100-sxm4-80gb": "A100-80GB",
    "nvidia a100-pcie-80gb": "A100-80GB",
    "nvidia a100 80gb pcie": "A100-80GB",
    "nvidia h100 80gb hbm3": "H100-SXM-80GB",
    "nvidia h100 pcie": "H100-PCIe",
    "nvidia h200": "H200-141GB",
    "nvidia b200": "B200",
    "nvidia geforce rtx 4090": "RTX-4090",
    "tesla p100-pcie-16gb": "P100",
    "tesla p100-sxm2-16gb": "P100",
    "tesla v100-sxm2-16gb": "V100M16",
    "tesla v100-pcie-16gb": "V100M16",
    "tesla v100-sxm2-32gb": "V100M32",
    "tesla v100-pcie-32gb": "V100M32",
    "ascend910b": "Ascend-910B",
    "ascend 910b": "Ascend-910B",
    "ascend910b3": "Ascend-910B",
}


class ProbeError(SuanliError):
    """GPU discovery failed: NVML is absent or broken, or a declared node is unknown."""


@dataclass(frozen=True, slots=True)
class MigDevice:
    uuid: str
    profile: str  # e.g. "3g.40gb"
    start_slot: int  # placement start, as `nvidia-smi mig -lgi` shows it
    gpu_instance_id: int
    processes: int = 0  # compute processes running on it now (NVML), whoever started them


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    uuid: str
    model_name: str  # the catalogue name when the device name is known, else the raw name
    memory_mib: int
    mig_mode: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    raw_name: str = ""


@dataclass(frozen=True, slots=True)
class HostInventory:
    hostname: str
    gpus: tuple[GpuDevice, ...]
    driver_version: str | None = None
    cuda_version: str | None = None

    def gpu(self, index: int) -> GpuDevice:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise ProbeError(f"host {self.hostname} has no GPU {index} (it has {len(self.gpus)})")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, for the registration message and fixtures."""
        return {
            "hostname": self.hostname,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "gpus": [
                {
                    "index": gpu.index,
                    "uuid": gpu.uuid,
                    "model_name": gpu.model_name,
                    "raw_name": gpu.raw_name,
                    "memory_mib": gpu.memory_mib,
                    "mig_mode": gpu.mig_mode,
                    "mig_devices": [
                        {
                            "uuid": mig.uuid,
                            "profile": mig.profile,
                            "start_slot": mig.start_slot,
                            "gpu_instance_id": mig.gpu_instance_id,
                            "processes": mig.processes,
                        }
                        for mig in gpu.mig_devices
                    ],
                }
                for gpu in self.gpus
            ],
        }


@dataclass(frozen=True, slots=True)
class GpuTelemetry:
    """One GPU's readings for a heartbeat; None where the probe cannot tell."""

    index: int
    utilization_pct: int | None = None
    memory_used_mib: int | None = None
    power_w: float | None = None


class GpuProbe(Protocol):
    def inventory(self) -> HostInventory: ...

    def make_mig_device(
        self, gpu_index: int, wanted: tuple[int, str], in_use: Collection[tuple[int, str]]
    ) -> None:
        """Make the MIG instance `wanted` (start slot, profile) on a GPU, destroying the idle instances in
        its slots first; `MigSetupError` if one is `in_use` (a rental's here, or running processes)."""
        ...

    def telemetry(self) -> tuple[GpuTelemetry, ...]: ...


def catalog_name(raw_name: str) -> str:
    """The catalogue name for a device name as NVML or npu-smi prints it; the raw name when unknown."""
    key = " ".join(raw_name.split()).casefold()
    return DEVICE_NAMES.get(key, raw_name.strip())


def mig_profile_from_name(mig_name: str) -> str | None:
    """The profile of a MIG device from its NVML name ("NVIDIA A100-SXM4-80GB MIG 3g.40gb" -> "3g.40gb"); a
    media-extension instance ("... MIG 1g.10gb+me") as its base profile, whose slots it takes."""
    head, sep, tail = mig_name.rpartition(" MIG ")
    return base_profile(tail) if sep and head else None


class NvmlProbe:
    """Discovery through NVML. `nvml` defaults to nvidia-ml-py's `pynvml`; tests pass a recorded fake."""

    def __init__(self, nvml: Any = None, hostname: str | None = None) -> None:
        self._nvml = nvml if nvml is not None else pynvml
        self._hostname = hostname or socket.gethostname()

    def inventory(self) -> HostInventory:
        with self._session():
            nvml = self._nvml
            count = nvml.nvmlDeviceGetCount()
            gpus = tuple(self._device(index) for index in range(count))
            return HostInventory(
                hostname=self._hostname,
                gpus=gpus,
                driver_version=self._optional(lambda: _text(nvml.nvmlSystemGetDriverVersion())),
                cuda_version=self._optional(lambda: _cuda_text(nvml.nvmlSystemGetCudaDriverVersion())),
            )

    def telemetry(self) -> tuple[GpuTelemetry, ...]:
        with self._session():
            nvml = self._nvml
            readings = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                util = self._optional(lambda h=handle: nvml.nvmlDeviceGetUtilizationRates(h).gpu)
                used = self._optional(lambda h=handle: nvml.nvmlDeviceGetMemoryInfo(h).used // MIB)
                power_mw = self._optional(lambda h=handle: nvml.nvmlDeviceGetPowerUsage(h))
                power = None if power_mw is None else power_mw / 1000
                readings.append(GpuTelemetry(index, util, used, power))
            return tuple(readings)

    def make_mig_device(
        self, gpu_index: int, wanted: tuple[int, str], in_use: Collection[tuple[int, str]]
    ) -> None:
        with self._session():
            handle = self._nvml.nvmlDeviceGetHandleByIndex(gpu_index)
            NvmlMig(self._nvml, handle).make(self._geometry(handle), wanted, in_use)

    def _geometry(self, handle: object) -> MigGeometry:
        name = catalog_name(_text(self._nvml.nvmlDeviceGetName(handle)))
        geometry = CATALOG.get(name).mig if name in CATALOG else None
        if geometry is None:
            raise ProbeError(f"{name} has no MIG geometry in the catalogue")
        return geometry

    def _session(self) -> _NvmlSession:
        return _NvmlSession(self._nvml)

    def _device(self, index: int) -> GpuDevice:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        raw_name = _text(nvml.nvmlDeviceGetName(handle))
        mig_mode = self._mig_enabled(handle)
        return GpuDevice(
            index=index,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            model_name=catalog_name(raw_name),
            memory_mib=nvml.nvmlDeviceGetMemoryInfo(handle).total // MIB,
            mig_mode=mig_mode,
            mig_devices=self._mig_devices(handle) if mig_mode else (),
            raw_name=raw_name,
        )

    def _mig_enabled(self, handle: object) -> bool:
        modes = self._optional(lambda: self._nvml.nvmlDeviceGetMigMode(handle))
        if modes is None:  # not MIG-capable
            return False
        current = modes[0] if isinstance(modes, list | tuple) else modes
        return bool(current == getattr(self._nvml, "NVML_DEVICE_MIG_ENABLE", 1))

    def _mig_devices(self, handle: object) -> tuple[MigDevice, ...]:
        """MIG devices in use: UUID, profile (from the MIG device's name), placement of its GPU instance, and
        how many compute processes run on it (0 where NVML cannot say)."""
        nvml = self._nvml
        found = []
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            mig = self._optional(lambda s=slot: nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, s))
            if mig is None:  # NOT_FOUND: no MIG device at this position
                continue
            gi_id = nvml.nvmlDeviceGetGpuInstanceId(mig)
            info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id))
            name = _text(nvml.nvmlDeviceGetName(mig))
            running = self._optional(lambda m=mig: nvml.nvmlDeviceGetComputeRunningProcesses(m)) or ()
            found.append(
                MigDevice(
                    uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                    profile=mig_profile_from_name(name) or name,
                    start_slot=info.placement.start,
                    gpu_instance_id=gi_id,
                    processes=len(running),
                )
            )
        return tuple(sorted(found, key=lambda m: (m.start_slot, m.gpu_instance_id)))

    def _optional(self, read: Any) -> Any:
        """`read()`, or None when NVML answers that the value is not supported or not found."""
        try:
            return read()
        except self._nvml.NVMLError:
            return None


class DeclaredProbe:
    """The fake of NVML: one node of a fleet file, with stable UUIDs and the file's MIG layout.

    GPU UUIDs are `GPU-<uuid5(node/index)>`, MIG UUIDs `MIG-<uuid5(node/index/mig/start/profile)>`: NVIDIA's
    shapes, the same on every run, different for every node. GPU instance ids count from 1 in start order.
    """

    def __init__(self, node: Node, catalog: Catalog = CATALOG) -> None:
        self._node = node
        self._catalog = catalog
        self._layouts: dict[int, list[tuple[int, str]]] = {}  # GPU -> its MIG instances, as changed since

    @classmethod
    def from_file(cls, path: Path, node_name: str, catalog: Catalog = CATALOG) -> DeclaredProbe:
        fleet = read_fleet(path, catalog)
        for node in fleet.nodes:
            if node.name == node_name:
                return cls(node, catalog)
        known = ", ".join(node.name for node in fleet.nodes)
        raise ProbeError(f"{path}: no node named {node_name!r}; its nodes are {known}")

    def inventory(self) -> HostInventory:
        node = self._node
        model = self._catalog.get(node.gpu_model)
        gpus = []
        for index in range(node.gpu_count):
            mig = node.gpu_mode is GpuMode.MIG
            gpus.append(
                GpuDevice(
                    index=index,
                    uuid=declared_gpu_uuid(node.name, index),
                    model_name=model.name,
                    memory_mib=model.memory_mib,
                    mig_mode=mig,
                    mig_devices=self._mig_devices(index) if mig else (),
                    raw_name=model.name,
                )
            )
        return HostInventory(hostname=node.name, gpus=tuple(gpus))

    def telemetry(self) -> tuple[GpuTelemetry, ...]:
        return tuple(GpuTelemetry(index) for index in range(self._node.gpu_count))

    def make_mig_device(
        self, gpu_index: int, wanted: tuple[int, str], in_use: Collection[tuple[int, str]]
    ) -> None:
        geometry = self._catalog.get(self._node.gpu_model).mig
        if self._node.gpu_mode is not GpuMode.MIG or geometry is None:
            raise ProbeError(f"{self._node.name} has no GPUs in MIG mode")
        instances = self._instances(gpu_index)
        doomed = plan_change(geometry, instances, wanted, in_use)
        if doomed or wanted not in instances:
            self._layouts[gpu_index] = sorted([i for i in instances if i not in doomed] + [wanted])

    def _instances(self, index: int) -> list[tuple[int, str]]:
        """The GPU's MIG instances: the fleet file's layout until `make_mig_device` changed it."""
        if index not in self._layouts:
            node = self._node
            geometry = self._catalog.get(node.gpu_model).mig
            layout = node.mig_layouts[index] if index < len(node.mig_layouts) else ()
            packed = pack_layout(geometry, layout) if geometry is not None and layout else ()
            self._layouts[index] = sorted((start, profile) for start, profile, _busy in packed)
        return self._layouts[index]

    def _mig_devices(self, index: int) -> tuple[MigDevice, ...]:
        node = self._node
        instances = self._instances(index)
        return tuple(
            MigDevice(
                uuid=declared_mig_uuid(node.name, index, start, profile),
                profile=profile,
                start_slot=start,
                gpu_instance_id=number,
            )
            for number, (start, profile) in enumerate(instances, start=1)
        )


def declared_gpu_uuid(node_name: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(DECLARED_NAMESPACE, f'{node_name}/{index}')}"


def declared_mig_uuid(node_name: str, index: int, start_slot: int, profile: str) -> str:
    return f"MIG-{uuid.uuid5(DECLARED_NAMESPACE, f'{node_name}/{index}/mig/{start_slot}/{profile}')}"


def inventory_from_dict(data: Mapping[str, Any]) -> HostInventory:
    """The inverse of `HostInventory.to_dict`."""
    return HostInventory(
        hostname=data["hostname"],
        driver_version=data.get("driver_version"),
        cuda_version=data.get("cuda_version"),
        gpus=tuple(
            GpuDevice(
                index=gpu["index"],
                uuid=gpu["uuid"],
                model_name=gpu["model_name"],
                memory_mib=gpu["memory_mib"],
                mig_mode=gpu.get("mig_mode", False),
                raw_name=gpu.get("raw_name", ""),
                mig_devices=tuple(MigDevice(**mig) for mig in gpu.get("mig_devices", ())),
            )
            for gpu in data["gpus"]
        ),
    )


class _NvmlSession:
    """nvmlInit on enter, nvmlShutdown on exit; NVML failures become ProbeError."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    def __enter__(self) -> None:
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise ProbeError(f"NVML is not usable on this host ({exc}); use --declared FILE") from None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()
        if isinstance(exc, self._nvml.NVMLError):
            raise ProbeError(f"NVML failed while probing: {exc}") from exc


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _cuda_text(version: int) -> str:
    """NVML's CUDA driver version integer (12040) as text ("12.4")."""
    return f"{version // 1000}.{version % 1000 // 10}"
