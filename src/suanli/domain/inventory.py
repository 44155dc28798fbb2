"""The fleet as configured: regions, nodes and their GPUs (static facts, not what is free)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class GpuMode(StrEnum):
    WHOLE = "whole"  # rented only as whole GPUs
    MIG = "mig"  # carved into MIG instances
    SHARED = "shared"  # shares of compute and memory, or whole when idle


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    jurisdiction: str
    grid_gco2_per_kwh: float
    pue: float


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU host. All its GPUs are one model; `mig_layouts` holds one layout (profile names) per GPU."""

    name: str
    region: str
    topology: tuple[str, ...]
    cpu_milli: int
    memory_mib: int
    gpu_model: str
    gpu_count: int
    gpu_mode: GpuMode = GpuMode.WHOLE
    mig_layouts: tuple[tuple[str, ...], ...] = ()
    provider: str = "platform"
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def topology_path(self) -> str:
        return "/".join(self.topology)


@dataclass(frozen=True, slots=True)
class Fleet:
    regions: Mapping[str, Region]
    nodes: tuple[Node, ...]

    @property
    def gpu_count(self) -> int:
        return sum(node.gpu_count for node in self.nodes)
