"""GPU catalogue types: models, vendors and NVIDIA MIG geometry with its placement table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from suanli.domain.errors import CatalogError


class Vendor(StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"
    HUAWEI = "huawei"
    BIREN = "biren"
    UNDISCLOSED = "undisclosed"

    @property
    def label(self) -> str:
        """The vendor's name as people write it ("AMD", "Huawei"), for messages."""
        return _VENDOR_LABELS.get(self, self.value)


_VENDOR_LABELS = {
    Vendor.NVIDIA: "NVIDIA",
    Vendor.AMD: "AMD",
    Vendor.HUAWEI: "Huawei",
    Vendor.BIREN: "Biren",
    Vendor.UNDISCLOSED: "an undisclosed vendor",
}


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU instance profile: size in placement slots, compute slices, memory, allowed start slots."""

    name: str
    compute_slices: int
    placement_slots: int
    memory_gib: float
    valid_starts: tuple[int, ...]

    @property
    def memory_mib(self) -> int:
        return int(self.memory_gib * 1024)

    def slots_at(self, start: int) -> range:
        return range(start, start + self.placement_slots)


@dataclass(frozen=True, slots=True)
class MigGeometry:
    """How a MIG-capable model is carved: slot count, compute slices and the profiles NVIDIA allows."""

    placement_slot_count: int
    compute_slice_count: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.profiles)
        raise CatalogError(f"unknown MIG profile {name!r}; this model has {known}")

    def has_profile(self, name: str) -> bool:
        return any(profile.name == name for profile in self.profiles)

    def instance_milli(self, profile: MigProfile) -> int:
        """An instance's share of the GPU's compute in milli-GPUs, its compute slices of all, rounded down:
        what the scheduler holds and a contract covers, so a whole GPU's instances never count past 1000."""
        return 1000 * profile.compute_slices // self.compute_slice_count


@dataclass(frozen=True, slots=True)
class GpuModel:
    """A catalogue entry; `sources` maps each figure's field name to where the number comes from."""

    name: str
    family: str
    vendor: Vendor
    memory_gib: float
    bf16_dense_tflops: float
    tdp_watts: int
    nvlink: bool
    mig: MigGeometry | None = None
    # how many devices the vendor's runtime numbers for one card: an MI250X's two GCDs are two ROCm devices
    runtime_devices_per_card: int = 1
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def memory_mib(self) -> int:
        return int(self.memory_gib * 1024)

    def runtime_devices(self, card_index: int) -> range:
        """The runtime's device indices of card `card_index` on its host (2i and 2i+1 for two per card)."""
        per_card = self.runtime_devices_per_card
        return range(card_index * per_card, (card_index + 1) * per_card)

    def matches(self, wanted: str) -> bool:
        """True when `wanted` names this model or its family, case-insensitively."""
        wanted = wanted.casefold()
        return wanted in (self.name.casefold(), self.family.casefold())


class Catalog:
    """Lookup of GPU models by exact name or unambiguous alias (family name)."""

    def __init__(self, models: tuple[GpuModel, ...]) -> None:
        self._by_name = {model.name.casefold(): model for model in models}
        self.models = models

    def get(self, name: str) -> GpuModel:
        model = self._by_name.get(name.casefold())
        if model is not None:
            return model
        family = [m for m in self.models if m.family.casefold() == name.casefold()]
        if len(family) == 1:
            return family[0]
        if family:
            names = " or ".join(sorted(m.name for m in family))
            raise CatalogError(f"GPU model {name!r} is ambiguous: say {names}")
        known = ", ".join(sorted(m.name for m in self.models))
        raise CatalogError(f"unknown GPU model {name!r}; known models: {known}")

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self.get(name)
        except CatalogError:
            return False
        return True
