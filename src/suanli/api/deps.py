"""Request dependencies: the services and the authenticated caller (`Authorization: Bearer <key>`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from suanli.api.wiring import Services
from suanli.app.records import Caller

bearer = HTTPBearer(auto_error=False, description="An API key (sk_...)")


def services(request: Request) -> Services:
    return request.app.state.services


def caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Caller:
    """The key's tenant; a tenant past `SUANLI_API_RATE` gets 429 (`RateLimited`) before any work."""
    secret = credentials.credentials if credentials is not None else None
    found = services(request).tenants.authenticate(secret)
    limit = services(request).api_rate
    if limit is not None and found.tenant.role == "tenant":
        limit.hit(found.tenant.id)
    return found


ServicesDep = Annotated[Services, Depends(services)]
CallerDep = Annotated[Caller, Depends(caller)]
