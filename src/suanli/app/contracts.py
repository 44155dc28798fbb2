"""Contracts (compute futures): sign one if the fleet can honour it, list them, transfer them.

Overbooking is refused by the domain's `check_contract`: at every instant of the window, the contracts of a
(model, region) stay within the fleet's GPUs of that model in that region.
"""

from __future__ import annotations

from datetime import UTC, datetime

from suanli.app.errors import Conflict, Forbidden, Invalid, NotFound
from suanli.app.fleet import FleetCache
from suanli.app.ids import new_id
from suanli.app.ports import Clock, UnitOfWorkFactory
from suanli.app.records import Caller, ContractRecord
from suanli.domain.catalog import Catalog
from suanli.domain.contracts import Contract, ContractError, check_contract, fleet_capacity, transfer
from suanli.domain.errors import CatalogError


class ContractService:
    def __init__(self, uow: UnitOfWorkFactory, clock: Clock, cache: FleetCache, catalog: Catalog) -> None:
        self.uow, self.clock, self.cache, self.catalog = uow, clock, cache, catalog

    def create(
        self,
        caller: Caller,
        gpu_model: str,
        count: int,
        region: str,
        starts_at: datetime,
        ends_at: datetime,
        tenant_id: str | None,
    ) -> ContractRecord:
        holder = tenant_id or caller.tenant.id
        if holder != caller.tenant.id and not caller.is_admin:
            raise Forbidden("only admins sign contracts for another tenant", field="tenant_id")
        try:
            model = self.catalog.get(gpu_model)
        except CatalogError as error:
            raise Invalid(str(error), field="gpu_model") from None
        starts_at, ends_at = _utc(starts_at), _utc(ends_at)
        if ends_at <= starts_at:
            raise Invalid("must be after starts_at", field="ends_at")
        now = self.clock.now()
        if ends_at <= now:
            raise Invalid("the window has already ended", field="ends_at")
        record = ContractRecord(new_id("ctr"), holder, model.name, count, region, starts_at, ends_at, now)
        with self.uow() as uow:
            if uow.tenants.get(holder) is None:
                raise NotFound(f"no tenant {holder}", field="tenant_id")
            _, fleet = self.cache.load(uow)
            if fleet is None:
                raise Conflict("no fleet yet: PUT /v1/fleet first", field="gpu_model")
            if region not in fleet.regions:
                raise Invalid(f"unknown region {region!r}", field="region")
            existing = [_domain(c) for c in uow.contracts.list(None)]
            try:
                check_contract(_domain(record), existing, fleet_capacity(fleet))
            except ContractError as error:
                raise Conflict(str(error), field="count") from None
            uow.contracts.add(record)
            uow.commit()
        return record

    def list(self, caller: Caller) -> list[ContractRecord]:
        with self.uow() as uow:
            return uow.contracts.list(None if caller.is_admin else caller.tenant.id)

    def get(self, caller: Caller, contract_id: str) -> ContractRecord:
        with self.uow() as uow:
            record = uow.contracts.get(contract_id)
        if record is None or (not caller.is_admin and record.tenant_id != caller.tenant.id):
            raise NotFound(f"no contract {contract_id}")
        return record

    def transfer(self, caller: Caller, contract_id: str, to_tenant_id: str) -> ContractRecord:
        record = self.get(caller, contract_id)
        now = self.clock.now()
        with self.uow() as uow:
            if uow.tenants.get(to_tenant_id) is None:
                raise NotFound(f"no tenant {to_tenant_id}", field="to_tenant_id")
            try:
                moved = transfer(_domain(record), to_tenant_id, now.timestamp())
            except ContractError as error:
                raise Conflict(str(error), field="to_tenant_id") from None
            uow.contracts.set_tenant(record.id, moved.tenant)
            uow.commit()
        return ContractRecord(
            record.id, moved.tenant, record.gpu_model, record.count, record.region,
            record.starts_at, record.ends_at, record.created_at,
        )  # fmt: skip


def _domain(record: ContractRecord) -> Contract:
    return Contract(
        record.id, record.tenant_id, record.gpu_model, record.region, record.count,
        record.starts_at.timestamp(), record.ends_at.timestamp(),
    )  # fmt: skip


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
