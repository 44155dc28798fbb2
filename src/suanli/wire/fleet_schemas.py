"""Request and response bodies of the fleet: nodes with their MIG instances and drains (and the contracts a
drain leaves short), offers of free capacity, maintenance windows."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from suanli.wire.base import Moment, RequestModel, TierName, WireModel


class FleetResponse(WireModel):
    regions: int
    nodes: int
    gpus: int
    short_contracts: list[str] = Field(
        default_factory=list,
        description="Forced: the signed contracts the new fleet leaves short of GPUs, or shorter.",
    )
    shortfalls: list[ContractShortfallResponse] = Field(
        default_factory=list,
        description="Forced: each of those contracts with how short it is left, and when.",
    )


class MigInstanceResponse(WireModel):
    gpu_index: int
    start_slot: int
    profile: str
    busy: bool


class NodeResponse(WireModel):
    name: str
    region: str
    topology: str
    gpu_model: str
    gpu_count: int
    gpu_mode: Literal["whole", "mig", "shared"]
    cpu_milli: int
    memory_mib: int
    provider: str
    labels: dict[str, str]
    schedulable: bool
    free_gpu_milli: int = Field(description="Idle GPU capacity in milli-GPUs (1000 = one GPU).")
    maintenance_until: datetime | None = Field(
        default=None,
        description="While a maintenance window (or its notice lead) keeps the node out: the window's end.",
    )
    mig_instances: list[MigInstanceResponse] = Field(
        default_factory=list,
        description="A MIG node's instances as the scheduler lays them out (busy: a rental holds it).",
    )
    mig_host_gpus: list[int] = Field(
        default_factory=list,
        description="The GPUs laid out as their host's agent reported them (instances made by hand or by "
        "earlier rentals); the others as the fleet declares.",
    )
    gpu_mismatch: str | None = Field(
        default=None,
        description="While the GPUs its agent's probe reports are not the ones the fleet declares (model, "
        "count): how they differ. The node is cordoned meanwhile, and back once a report matches.",
    )


class ContractShortfallResponse(WireModel):
    """A signed contract a forced drain or maintenance window leaves short of GPUs, and by how much."""

    contract_id: str
    tenant_id: str = Field(description="The contract's holder.")
    gpu_model: str
    region: str
    count: int = Field(description="GPUs the contract holds.")
    starts_at: datetime
    ends_at: datetime
    short_at: datetime = Field(
        description="When its pool (model and region) is shortest inside the window (the first such instant)."
    )
    contracted_gpus: int = Field(
        description="GPUs the pool's contracts open then hold, this one's among them."
    )
    in_service_gpus: int = Field(description="GPUs of the pool left in service then.")
    short_gpus: int = Field(
        description="contracted_gpus - in_service_gpus: the GPUs sold that are not there."
    )


class NodeDrainResponse(NodeResponse):
    """A node just drained, with the signed contracts a forced drain left short."""

    short_contracts: list[str] = Field(
        default_factory=list, description="Forced: the contracts this drain leaves short of GPUs."
    )
    shortfalls: list[ContractShortfallResponse] = Field(
        default_factory=list,
        description="Forced: each of those contracts with how short it is left, and when.",
    )


class OfferResponse(WireModel):
    gpu_model: str
    region: str
    jurisdiction: str
    tier: TierName
    interconnect: str | None
    free_gpus: int = Field(
        description="Whole idle GPUs of this model in this region; on a row with a `mig_profile`, the "
        "instances of that profile that could run at once now (each profile counted on its own)."
    )
    max_gpus_per_node: int = Field(description="The most of those on one node.")
    nodes_with_free_gpus: int
    price_micros_per_gpu_hour: int = Field(
        description="One whole GPU per hour if placed now: the price book's list price, or for spot the "
        "pool's spot price at its current utilization (a spot rental pays it, never above its bid), less "
        "the searching tenant's plan discount (`plan_discount_bp`)."
    )
    mig_profile: str | None = Field(None, description="A MIG profile: the row offers instances of it.")
    unit_price_micros_per_hour: int = Field(
        0,
        description="One unit per hour: a whole GPU (a share pays its fraction), or one instance of "
        "`mig_profile`.",
    )
    shares: bool = Field(
        False,
        description="The row offers shares of a GPU: `free_gpus` counts the GPUs with room for one (some "
        "compute and memory free), `largest_share_milli` the largest share one of them can take (the "
        "compute it has free, at most 990: a whole GPU is rented as a count).",
    )
    largest_share_milli: int | None = None
    share_memory_mib: int | None = Field(
        None,
        description="On a shares row: the GPU memory (MiB) free on a GPU with `largest_share_milli` free "
        "(the most among such GPUs).",
    )
    plan_discount_bp: int = Field(
        0,
        description="The searching tenant's plan discount (basis points) on this tier, already taken off "
        "the prices: a one-unit rental placed now is quoted at `unit_price_micros_per_hour`.",
    )


class MaintenanceCreateRequest(RequestModel):
    node: str = Field(max_length=200, description="The node to take out of service.")
    starts_at: Moment
    ends_at: Moment
    reason: str = Field(default="", max_length=500)
    force: bool = Field(
        default=False, description="Schedule it even when it leaves contracts short (they are named)."
    )


class MaintenanceResponse(WireModel):
    id: str
    node: str
    starts_at: datetime
    ends_at: datetime
    reason: str
    created_at: datetime
    short_contracts: list[str] = Field(
        default_factory=list, description="Forced: the contracts this window leaves short of GPUs."
    )
    shortfalls: list[ContractShortfallResponse] = Field(
        default_factory=list,
        description="Forced: each of those contracts with how short it is left, and when.",
    )
