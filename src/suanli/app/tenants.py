"""Tenants, API keys and authentication. Keys are shown once and stored as SHA-256 digests.

`authenticate` looks a key up by its digest and confirms it with `hmac.compare_digest`; `bootstrap` turns
`SUANLI_BOOTSTRAP_ADMIN_KEY` into the first admin key when the database has no admin yet.
"""

from __future__ import annotations

import hmac

from suanli.app.errors import Conflict, Duplicate, Forbidden, Invalid, NotFound, Unauthorized
from suanli.app.ids import digest, new_id, new_secret
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import ROLES, ApiKey, Caller, Rental, Tenant
from suanli.domain.fleet_format import DEFAULT_PROVIDER

AUTH_CACHE_TTL_S = 5.0  # a key revoked on another server process stops working within this time
AUTH_CACHE_SIZE = 10_000
# unrevoked keys a tenant may hold: each is a credential to keep track of (webhooks are capped likewise)
MAX_LIVE_KEYS = 50


class TenantService:
    def __init__(self, uow: UnitOfWorkFactory, clock: Clock) -> None:
        self.uow, self.clock = uow, clock
        # digest -> (caller, when it was checked): saves two queries per request on the hot path
        self._recent: dict[str, tuple[Caller, float]] = {}

    def bootstrap(self, admin_key: str | None) -> Tenant | None:
        """Make `admin_key` the first admin's key when there is no admin; None when nothing was done."""
        if not admin_key:
            return None
        with self.uow() as uow:
            if uow.tenants.has_admin():
                return None
            now = self.clock.now()
            tenant_id = new_id("ten")
            name = (
                "admin" if uow.tenants.named("admin") is None else f"admin-{tenant_id.removeprefix('ten_')}"
            )
            tenant = Tenant(tenant_id, name, "admin", now)
            uow.tenants.add(tenant)
            uow.keys.add(ApiKey(new_id("key"), tenant.id, "bootstrap", digest(admin_key), now))
            uow.commit()
            return tenant

    def authenticate(self, secret: str | None) -> Caller:
        if not secret:
            raise Unauthorized("send Authorization: Bearer <key>")
        wanted = digest(secret)
        now_s = self.clock.now().timestamp()
        recent = self._recent.get(wanted)
        if recent is not None and now_s - recent[1] < AUTH_CACHE_TTL_S:
            return recent[0]
        with self.uow() as uow:
            key = uow.keys.by_digest(wanted)
            if key is None or key.revoked or not hmac.compare_digest(key.secret_sha256, wanted):
                raise Unauthorized("unknown or revoked key")
            tenant = uow.tenants.get(key.tenant_id)
            if tenant is None:
                raise Unauthorized("unknown or revoked key")
        if len(self._recent) >= AUTH_CACHE_SIZE:
            self._recent.clear()
        self._recent[wanted] = (Caller(tenant, key.id), now_s)
        return self._recent[wanted][0]

    def create_tenant(self, caller: Caller, name: str, role: str) -> Tenant:
        require_admin(caller)
        if role not in ROLES:
            raise Invalid(f"role must be one of {', '.join(ROLES)}", field="role")
        if role == "provider" and name.casefold() == DEFAULT_PROVIDER:
            raise Invalid(
                f"{DEFAULT_PROVIDER!r} names the operator's own nodes: a provider tenant is named as "
                "the fleet file's `provider` of its nodes",
                field="name",
            )
        tenant = Tenant(new_id("ten"), name, role, self.clock.now())
        with self.uow() as uow:
            if (same := uow.tenants.named(name)) is not None:
                raise Duplicate(
                    f"a tenant named {same.name!r} exists ({same.id}); pick another name", field="name"
                )
            uow.tenants.add(tenant)
            uow.commit()
        return tenant

    def list_tenants(self, caller: Caller) -> list[Tenant]:
        if not caller.is_admin:
            return [caller.tenant]
        with self.uow() as uow:
            return uow.tenants.list()

    def get_tenant(self, caller: Caller, tenant_id: str) -> Tenant:
        if not caller.is_admin and tenant_id != caller.tenant.id:
            raise NotFound(f"no tenant {tenant_id}")
        with self.uow() as uow:
            tenant = uow.tenants.get(tenant_id)
        if tenant is None:
            raise NotFound(f"no tenant {tenant_id}")
        return tenant

    def create_key(self, caller: Caller, tenant_id: str, label: str) -> tuple[ApiKey, str]:
        """A new key for the tenant (admin, or the tenant itself); the secret is returned only here."""
        self.get_tenant(caller, tenant_id)
        secret = new_secret()
        key = ApiKey(new_id("key"), tenant_id, label, digest(secret), self.clock.now())
        with self.uow() as uow:
            uow.tenants.get(tenant_id, lock=True)  # two creations at once count in turn
            if sum(not k.revoked for k in uow.keys.list_for(tenant_id)) >= MAX_LIVE_KEYS:
                raise Conflict(f"a tenant has at most {MAX_LIVE_KEYS} live API keys; revoke one first")
            uow.keys.add(key)
            uow.commit()
        return key, secret

    def list_keys(self, caller: Caller, tenant_id: str) -> list[ApiKey]:
        self.get_tenant(caller, tenant_id)
        with self.uow() as uow:
            return uow.keys.list_for(tenant_id)

    def revoke_key(self, caller: Caller, tenant_id: str, key_id: str) -> ApiKey:
        self.get_tenant(caller, tenant_id)
        with self.uow() as uow:
            key = uow.keys.get(key_id)
            if key is None or key.tenant_id != tenant_id:
                raise NotFound(f"no key {key_id}")
            uow.keys.revoke(key_id)
            uow.commit()
        self._recent = {d: entry for d, entry in self._recent.items() if entry[0].key_id != key_id}
        return ApiKey(key.id, key.tenant_id, key.label, key.secret_sha256, key.created_at, True)


def target_tenant(caller: Caller, tenant_id: str | None) -> str:
    """The tenant a read is about: the caller's own, or (admins only) another; others get NotFound."""
    if tenant_id is None or tenant_id == caller.tenant.id:
        return caller.tenant.id
    if not caller.is_admin:
        raise NotFound(f"no tenant {tenant_id}")
    return tenant_id


def owned_rental(uow: UnitOfWork, caller: Caller, rental_id: str, *, lock: bool = False) -> Rental:
    """The rental, if the caller may see it (its tenant, or an admin); others get NotFound, as if absent."""
    rental = uow.rentals.get(rental_id, lock=lock)
    if rental is None or (not caller.is_admin and rental.tenant_id != caller.tenant.id):
        raise NotFound(f"no rental {rental_id}")
    return rental


def require_admin(caller: Caller) -> None:
    if not caller.is_admin:
        raise Forbidden("this needs an admin key")


def require_operator(caller: Caller) -> None:
    """Admins and providers may see the fleet; tenants see offers instead."""
    if caller.tenant.role not in ("admin", "provider"):
        raise Forbidden("this needs an admin or provider key")
