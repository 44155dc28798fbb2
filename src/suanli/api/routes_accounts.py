"""/v1/tenants, /v1/tenants/{id}/keys, /v1/me."""

from __future__ import annotations

from fastapi import APIRouter, status

from suanli.api import mappers
from suanli.api.deps import CallerDep, ServicesDep
from suanli.api.errors import ERROR_RESPONSES
from suanli.wire.schemas import KeyCreateRequest, KeyResponse, MeResponse, TenantCreateRequest, TenantResponse

router = APIRouter(prefix="/v1", tags=["tenants"], responses=ERROR_RESPONSES)


@router.post("/tenants", status_code=status.HTTP_201_CREATED)
def create_tenant(body: TenantCreateRequest, caller: CallerDep, services: ServicesDep) -> TenantResponse:
    return mappers.tenant(services.tenants.create_tenant(caller, body.name, body.role))


@router.get("/tenants")
def list_tenants(caller: CallerDep, services: ServicesDep) -> list[TenantResponse]:
    return [mappers.tenant(t) for t in services.tenants.list_tenants(caller)]


@router.get("/tenants/{tenant_id}")
def get_tenant(tenant_id: str, caller: CallerDep, services: ServicesDep) -> TenantResponse:
    return mappers.tenant(services.tenants.get_tenant(caller, tenant_id))


@router.post("/tenants/{tenant_id}/keys", status_code=status.HTTP_201_CREATED)
def create_key(
    tenant_id: str, body: KeyCreateRequest, caller: CallerDep, services: ServicesDep
) -> KeyResponse:
    key, secret = services.tenants.create_key(caller, tenant_id, body.label)
    return mappers.key(key, secret)


@router.get("/tenants/{tenant_id}/keys")
def list_keys(tenant_id: str, caller: CallerDep, services: ServicesDep) -> list[KeyResponse]:
    return [mappers.key(k) for k in services.tenants.list_keys(caller, tenant_id)]


@router.delete("/tenants/{tenant_id}/keys/{key_id}")
def revoke_key(tenant_id: str, key_id: str, caller: CallerDep, services: ServicesDep) -> KeyResponse:
    return mappers.key(services.tenants.revoke_key(caller, tenant_id, key_id))


@router.get("/me")
def me(caller: CallerDep) -> MeResponse:
    return MeResponse(tenant=mappers.tenant(caller.tenant), key_id=caller.key_id)
