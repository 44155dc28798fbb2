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
    secret = credentials.credentials if credentials is not None else None
    return services(request).tenants.authenticate(secret)


ServicesDep = Annotated[Services, Depends(services)]
CallerDep = Annotated[Caller, Depends(caller)]
