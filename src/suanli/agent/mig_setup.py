"""Making the MIG instance a placement chose, on the host: the scheduler may place a MIG slice where no
instance of that profile exists yet (a `Repartition`: idle instances in its slots destroyed, one created at
its start). The agent makes it before the workload starts, with the same rule: only idle instances in the new
one's slots go, and never one that a rental on this host holds.

`plan_change` is the pure part (what to destroy, given the GPU's instances); `NvmlMig` carries it out through
NVML (GPU instance with placement, then its full compute instance). `DeclaredProbe` applies the same plan to
its declared layout.
"""

from __future__ import annotations

import ctypes
from collections.abc import Collection, Iterator, Sequence
from typing import Any

from suanli.domain.catalog import MigGeometry
from suanli.domain.errors import SuanliError
from suanli.domain.mig import base_profile

Instance = tuple[int, str]  # (start slot, profile name): one MIG instance on a GPU


class MigSetupError(SuanliError):
    """The MIG instance cannot be made: unknown profile or start, or an instance in its slots is in use."""


def plan_change(
    geometry: MigGeometry,
    existing: Sequence[Instance],
    wanted: Instance,
    in_use: Collection[Instance],
) -> list[Instance]:
    """The instances to destroy before `wanted` can be created (none if it exists already)."""
    start, profile_name = wanted
    if not geometry.has_profile(profile_name):
        known = ", ".join(p.name for p in geometry.profiles)
        raise MigSetupError(f"no MIG profile {profile_name} on this GPU (it has {known})")
    profile = geometry.profile(profile_name)
    if start not in profile.valid_starts:
        raise MigSetupError(f"{profile_name} cannot start at slot {start} (valid: {profile.valid_starts})")
    if wanted in existing:
        return []
    slots = set(profile.slots_at(start))
    overlapping = [
        i for i in existing if slots.intersection(geometry.profile(base_profile(i[1])).slots_at(i[0]))
    ]
    busy = [i for i in overlapping if i in in_use]
    if busy:
        held = ", ".join(f"{name} at slot {at}" for at, name in busy)
        raise MigSetupError(
            f"cannot make {profile_name} at slot {start}: {held} is in use (a rental's, or running processes)"
        )
    return overlapping


class NvmlMig:
    """`plan_change` carried out with NVML on one GPU (`nvml`: pynvml, or a fake with its functions)."""

    def __init__(self, nvml: Any, handle: object) -> None:
        self._nvml, self._handle = nvml, handle

    def make(self, geometry: MigGeometry, wanted: Instance, in_use: Collection[Instance]) -> None:
        instances = self._gpu_instances()
        doomed = plan_change(geometry, sorted(instances), wanted, in_use)
        for instance in doomed:
            self._destroy(instances[instance])
        if doomed or wanted not in instances:
            self._create(geometry, wanted)
        elif not self._has_compute(instances[wanted]):  # a GPU instance alone is no device: complete it
            self._add_compute(instances[wanted], wanted[1])

    def _profiles(self) -> dict[str, Any]:
        """GPU instance profile name ("1g.10gb") -> its NVML profile info, for the profiles this GPU has."""
        nvml, found = self._nvml, {}
        for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(self._handle, index)
            except nvml.NVMLError:
                continue  # not supported on this GPU
            name = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
            found[name.removeprefix("MIG ").strip()] = info
        return found

    def _gpu_instances(self) -> dict[Instance, object]:
        """Every GPU instance on the GPU, by (start slot, profile), with or without a compute instance."""
        nvml, found = self._nvml, {}
        for name, profile in self._profiles().items():
            handles = (nvml.c_nvmlGpuInstance_t * max(profile.instanceCount, 1))()
            count = ctypes.c_uint(0)
            nvml.nvmlDeviceGetGpuInstances(self._handle, profile.id, handles, ctypes.byref(count))
            for position in range(count.value):
                info = nvml.nvmlGpuInstanceGetInfo(handles[position])
                found[(info.placement.start, base_profile(name))] = handles[position]  # "+me" as its base
        return found

    def _compute_profiles(self, gpu_instance: object) -> Iterator[Any]:
        """The compute instance profiles this GPU instance offers (shared engines), as NVML describes them."""
        nvml = self._nvml
        for index in range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                yield nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gpu_instance, index, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
            except nvml.NVMLError:
                continue  # not offered on this GPU instance

    def _destroy(self, gpu_instance: object) -> None:
        """Its compute instances first, then the GPU instance (NVML refuses while a process uses it)."""
        for compute_instance in list(self._compute_instances(gpu_instance)):
            self._nvml.nvmlComputeInstanceDestroy(compute_instance)
        self._nvml.nvmlGpuInstanceDestroy(gpu_instance)

    def _create(self, geometry: MigGeometry, wanted: Instance) -> None:
        """The GPU instance at its start, and one compute instance over all of it (a MIG device)."""
        nvml = self._nvml
        start, name = wanted
        profile = self._profiles().get(name)
        if profile is None:
            raise MigSetupError(f"NVML offers no GPU instance profile {name} on this GPU")
        placement = nvml.c_nvmlGpuInstancePlacement_t(start, geometry.profile(name).placement_slots)
        gpu_instance = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            self._handle, profile.id, ctypes.byref(placement)
        )
        try:
            self._add_compute(gpu_instance, name)
        except BaseException:  # taken back: a GPU instance without a compute instance cannot run anything
            nvml.nvmlGpuInstanceDestroy(gpu_instance)
            raise

    def _add_compute(self, gpu_instance: object, name: str) -> None:
        """One compute instance over all of the GPU instance `name` (its slices)."""
        slices = self._profiles()[name].sliceCount
        for compute in self._compute_profiles(gpu_instance):
            if compute.sliceCount == slices:
                self._nvml.nvmlGpuInstanceCreateComputeInstance(gpu_instance, compute.id)
                return
        raise MigSetupError(f"no compute instance profile covers all of {name}")

    def _has_compute(self, gpu_instance: object) -> bool:
        """Whether the GPU instance has a compute instance (a MIG device a workload can use)."""
        return any(True for _ in self._compute_instances(gpu_instance))

    def _compute_instances(self, gpu_instance: object) -> Iterator[object]:
        """The compute instances of a GPU instance, of every profile."""
        nvml = self._nvml
        for profile in self._compute_profiles(gpu_instance):
            handles = (nvml.c_nvmlComputeInstance_t * max(profile.instanceCount, 1))()
            count = ctypes.c_uint(0)
            nvml.nvmlGpuInstanceGetComputeInstances(gpu_instance, profile.id, handles, ctypes.byref(count))
            yield from (handles[position] for position in range(count.value))
