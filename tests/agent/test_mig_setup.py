"""Making the MIG instance a placement chose: the plan (what goes), the declared probe, and NVML's calls in
the order a real GPU needs them (compute instances before their GPU instance, placement given on creation)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import ClassVar

import pynvml
import pytest

from suanli.agent.mig_setup import MigSetupError, NvmlMig, plan_change
from suanli.agent.probe import DeclaredProbe, declared_mig_uuid
from suanli.domain.catalog_data import CATALOG
from suanli.domain.inventory import GpuMode, Node

A100 = CATALOG.get("A100-80GB").mig
CARVED = [(0, "4g.40gb"), (4, "2g.20gb"), (6, "1g.10gb")]


def test_an_instance_that_exists_needs_no_change() -> None:
    assert plan_change(A100, CARVED, (4, "2g.20gb"), in_use=[]) == []


def test_the_idle_instances_in_its_slots_go_and_no_other() -> None:
    assert plan_change(A100, CARVED, (0, "7g.80gb"), in_use=[]) == CARVED
    assert plan_change(A100, CARVED, (4, "3g.40gb"), in_use=[(0, "4g.40gb")]) == [
        (4, "2g.20gb"),
        (6, "1g.10gb"),
    ]
    assert plan_change(A100, [], (2, "1g.10gb"), in_use=[]) == []


@pytest.mark.parametrize(
    ("wanted", "in_use", "message"),
    [
        ((0, "7g.80gb"), [(6, "1g.10gb")], "1g.10gb at slot 6 is in use"),
        ((1, "2g.20gb"), [], "2g.20gb cannot start at slot 1"),
        ((0, "5g.50gb"), [], "no MIG profile 5g.50gb"),
    ],
)
def test_what_cannot_be_made_is_refused(wanted, in_use, message: str) -> None:
    with pytest.raises(MigSetupError, match=message):
        plan_change(A100, CARVED, wanted, in_use)


def test_the_declared_probe_makes_the_instance_with_its_declared_uuid() -> None:
    node = Node(
        "m0",
        "r",
        ("r", "z", "p", "l"),
        64_000,
        512_000,
        "A100-80GB",
        2,
        GpuMode.MIG,
        (("4g.40gb", "2g.20gb", "1g.10gb"), ("3g.40gb", "3g.40gb")),
    )
    probe = DeclaredProbe(node)
    probe.make_mig_device(0, (0, "7g.80gb"), in_use=[])
    gpu0, gpu1 = probe.inventory().gpus
    assert [(m.profile, m.start_slot, m.uuid) for m in gpu0.mig_devices] == [
        ("7g.80gb", 0, declared_mig_uuid("m0", 0, 0, "7g.80gb"))
    ]
    assert [(m.profile, m.start_slot) for m in gpu1.mig_devices] == [("3g.40gb", 0), ("3g.40gb", 4)]
    with pytest.raises(MigSetupError, match=r"3g\.40gb at slot 4 is in use"):
        probe.make_mig_device(1, (4, "1g.10gb"), in_use=[(4, "3g.40gb")])


class MigNvml:
    """NVML's MIG calls over one A100 80GB: GPU and compute instances as NVML keeps them, handles as
    pointers, arrays filled as the C library fills them; a GPU instance with compute instances cannot go."""

    NVMLError = pynvml.NVMLError
    NVML_GPU_INSTANCE_PROFILE_COUNT = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT = pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    c_nvmlGpuInstance_t = pynvml.c_nvmlGpuInstance_t
    c_nvmlComputeInstance_t = pynvml.c_nvmlComputeInstance_t
    c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t
    # NVML profile index -> (profile id, name, slices); A100 80GB as `nvidia-smi mig -lgip` lists it
    GPU_PROFILES: ClassVar[dict[int, tuple[int, str, int]]] = {
        0: (19, "1g.10gb", 1),
        1: (14, "2g.20gb", 2),
        2: (9, "3g.40gb", 3),
        3: (5, "4g.40gb", 4),
        4: (0, "7g.80gb", 7),
        7: (20, "1g.10gb+me", 1),  # NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: with the media engines
        9: (15, "1g.20gb", 1),
    }
    COMPUTE_PROFILES: ClassVar[dict[int, int]] = {
        0: 1,
        1: 2,
        2: 3,
        3: 4,
        4: 7,
    }  # compute profile index -> slices (id = index)

    def __init__(self, instances: list[tuple[int, str, int]]) -> None:
        self.gis: dict[int, dict] = {}  # handle address -> {start, name, profile_id, cis: [addresses]}
        self.next = 1000
        self.calls: list[str] = []
        for start, name, cis in instances:
            address = self._new_gi(start, name)
            for _ in range(cis):
                self.gis[address]["cis"].append(self._address())

    def _address(self) -> int:
        self.next += 8
        return self.next

    def _new_gi(self, start: int, name: str) -> int:
        profile_id = next(pid for pid, n, _ in self.GPU_PROFILES.values() if n == name)
        address = self._address()
        self.gis[address] = {"start": start, "name": name, "profile_id": profile_id, "cis": []}
        return address

    @staticmethod
    def _key(handle) -> int:
        return ctypes.cast(handle, ctypes.c_void_p).value

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device, profile):
        if profile not in self.GPU_PROFILES:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pid, name, slices = self.GPU_PROFILES[profile]
        return SimpleNamespace(id=pid, name=f"MIG {name}".encode(), sliceCount=slices, instanceCount=7)

    def nvmlDeviceGetGpuInstances(self, device, profile_id, handles, count_ref) -> None:
        found = [a for a, gi in sorted(self.gis.items()) if gi["profile_id"] == profile_id]
        for position, address in enumerate(found):
            handles[position] = ctypes.cast(address, self.c_nvmlGpuInstance_t)
        count_ref._obj.value = len(found)

    def nvmlGpuInstanceGetInfo(self, gi):
        record = self.gis[self._key(gi)]
        return SimpleNamespace(placement=SimpleNamespace(start=record["start"], size=0))

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi, profile, engine):
        if profile not in self.COMPUTE_PROFILES or engine != 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(id=profile, sliceCount=self.COMPUTE_PROFILES[profile], instanceCount=7)

    def nvmlGpuInstanceGetComputeInstances(self, gi, profile_id, handles, count_ref) -> None:
        record = self.gis[self._key(gi)]
        slices = next(s for _, n, s in self.GPU_PROFILES.values() if n == record["name"])
        found = record["cis"] if self.COMPUTE_PROFILES[profile_id] == slices else []
        for position, address in enumerate(found):
            handles[position] = ctypes.cast(address, self.c_nvmlComputeInstance_t)
        count_ref._obj.value = len(found)

    def nvmlComputeInstanceDestroy(self, ci) -> None:
        key = self._key(ci)
        for record in self.gis.values():
            if key in record["cis"]:
                record["cis"].remove(key)
                self.calls.append(f"destroy ci of {record['name']}@{record['start']}")

    def nvmlGpuInstanceDestroy(self, gi) -> None:
        record = self.gis[self._key(gi)]
        if record["cis"]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        del self.gis[self._key(gi)]
        self.calls.append(f"destroy gi {record['name']}@{record['start']}")

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, device, profile_id, placement_ref):
        placement = placement_ref._obj
        name = next(n for pid, n, _ in self.GPU_PROFILES.values() if pid == profile_id)
        address = self._new_gi(placement.start, name)
        self.calls.append(f"create gi {name}@{placement.start} size {placement.size}")
        return ctypes.cast(address, self.c_nvmlGpuInstance_t)

    def nvmlGpuInstanceCreateComputeInstance(self, gi, profile_id) -> None:
        record = self.gis[self._key(gi)]
        record["cis"].append(self._address())
        self.calls.append(f"create ci {self.COMPUTE_PROFILES[profile_id]} slices in {record['name']}")


def test_nvml_destroys_the_idle_instances_then_makes_the_one_placed() -> None:
    nvml = MigNvml([(0, "4g.40gb", 1), (4, "2g.20gb", 1), (6, "1g.10gb", 0)])
    NvmlMig(nvml, "gpu0").make(A100, (4, "3g.40gb"), in_use=[(0, "4g.40gb")])
    assert nvml.calls == [
        "destroy ci of 2g.20gb@4",
        "destroy gi 2g.20gb@4",
        "destroy gi 1g.10gb@6",
        "create gi 3g.40gb@4 size 4",
        "create ci 3 slices in 3g.40gb",
    ]
    assert sorted((gi["start"], gi["name"], len(gi["cis"])) for gi in nvml.gis.values()) == [
        (0, "4g.40gb", 1),
        (4, "3g.40gb", 1),
    ]


def test_a_media_extension_instance_counts_as_its_base_profile() -> None:
    """An operator's `1g.10gb+me` (made by hand) takes 1g.10gb's slot: it is reused as a 1g.10gb, kept when
    in use, and destroyed like any idle instance in the way (it crashed the agent's plan: no such profile)."""
    nvml = MigNvml([(0, "1g.10gb+me", 1), (4, "3g.40gb", 1)])
    NvmlMig(nvml, "gpu0").make(A100, (0, "1g.10gb"), in_use=[])
    assert nvml.calls == []
    with pytest.raises(MigSetupError, match=r"1g\.10gb at slot 0 is in use"):
        NvmlMig(nvml, "gpu0").make(A100, (0, "2g.20gb"), in_use=[(0, "1g.10gb")])
    NvmlMig(nvml, "gpu0").make(A100, (0, "2g.20gb"), in_use=[(4, "3g.40gb")])
    assert nvml.calls == [
        "destroy ci of 1g.10gb+me@0",
        "destroy gi 1g.10gb+me@0",
        "create gi 2g.20gb@0 size 2",
        "create ci 2 slices in 2g.20gb",
    ]


def test_nvml_leaves_an_existing_instance_and_refuses_to_touch_one_in_use() -> None:
    nvml = MigNvml([(0, "4g.40gb", 1), (4, "2g.20gb", 1), (6, "1g.10gb", 1)])
    NvmlMig(nvml, "gpu0").make(A100, (6, "1g.10gb"), in_use=[])
    assert nvml.calls == []
    with pytest.raises(MigSetupError, match=r"4g\.40gb at slot 0 is in use"):
        NvmlMig(nvml, "gpu0").make(A100, (0, "7g.80gb"), in_use=[(0, "4g.40gb")])
    assert nvml.calls == []


class FailingComputeNvml(MigNvml):
    """NVML whose compute instance creation fails, as when the GPU runs out of a shared engine."""

    def nvmlGpuInstanceCreateComputeInstance(self, gi, profile_id) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)


def test_a_gpu_instance_whose_compute_instance_fails_is_taken_back() -> None:
    """A GPU instance alone is no device: left behind, later `make` calls would take it for the instance
    wanted and never complete it, so that slice could never run anything."""
    nvml = FailingComputeNvml([(0, "4g.40gb", 1)])
    with pytest.raises(pynvml.NVMLError):
        NvmlMig(nvml, "gpu0").make(A100, (4, "3g.40gb"), in_use=[])
    assert nvml.calls == ["create gi 3g.40gb@4 size 4", "destroy gi 3g.40gb@4"]
    assert [(gi["start"], gi["name"]) for gi in nvml.gis.values()] == [(0, "4g.40gb")]


def test_an_instance_left_without_its_compute_instance_is_completed_not_taken_as_made() -> None:
    nvml = MigNvml([(0, "4g.40gb", 1), (4, "3g.40gb", 0)])  # left so by an earlier failure
    NvmlMig(nvml, "gpu0").make(A100, (4, "3g.40gb"), in_use=[])
    assert nvml.calls == ["create ci 3 slices in 3g.40gb"]
    assert sorted((gi["start"], gi["name"], len(gi["cis"])) for gi in nvml.gis.values()) == [
        (0, "4g.40gb", 1),
        (4, "3g.40gb", 1),
    ]
