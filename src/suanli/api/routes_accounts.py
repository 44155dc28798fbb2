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
    """Create a tenant (admin key); a name is one tenant's whatever its case, so a second is 409."""
    return mappers.tenant(services.tenants.create_tenant(caller, body.name, body.role))


@router.get("/tenants")
def list_tenants(caller: CallerDep, services: ServicesDep) -> list[TenantResponse]:
    """Every tenant for an admin key; any other key sees only its own tenant."""
    return [mappers.tenant(t) for t in services.tenants.list_tenants(caller)]


@router.get("/tenants/{tenant_id}")
def get_tenant(tenant_id: str, caller: CallerDep, services: ServicesDep) -> TenantResponse:
    """One tenant: an admin any, another key only its own (404 for the rest)."""
    return mappers.tenant(services.tenants.get_tenant(caller, tenant_id))


@router.post("/tenants/{tenant_id}/keys", status_code=status.HTTP_201_CREATED)
def create_key(
    tenant_id: str, body: KeyCreateRequest, caller: CallerDep, services: ServicesDep
) -> KeyResponse:
    """A new API key for the tenant (an admin, or the tenant itself); its secret is in this answer only."""
    key, secret = services.tenants.create_key(caller, tenant_id, body.label)
    return mappers.key(key, secret)


@router.get("/tenants/{tenant_id}/keys")
def list_keys(tenant_id: str, caller: CallerDep, services: ServicesDep) -> list[KeyResponse]:
    """The tenant's API keys, revoked ones included, never with their secrets."""
    return [mappers.key(k) for k in services.tenants.list_keys(caller, tenant_id)]


@router.delete("/tenants/{tenant_id}/keys/{key_id}")
def revoke_key(tenant_id: str, key_id: str, caller: CallerDep, services: ServicesDep) -> KeyResponse:
    """Revoke one of the tenant's API keys: it stops working at once; the answer is the key as revoked."""
    return mappers.key(services.tenants.revoke_key(caller, tenant_id, key_id))


@router.get("/me")
def me(caller: CallerDep) -> MeResponse:
    """Who the calling key belongs to: its tenant (with its role) and the key's id."""
    return MeResponse(tenant=mappers.tenant(caller.tenant), key_id=caller.key_id)
