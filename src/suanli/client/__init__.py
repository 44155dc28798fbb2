"""Python SDK over suanli's REST API; the CLI uses it. Speaks only the wire schemas.

from suanli.client import Client
with Client("http://127.0.0.1:8080", api_key="sk_...") as api:
    rental = api.create_rental(RentalCreateRequest(gpu_model="H100", gpus=8), idempotency_key="train-7")

From asyncio code, `AsyncClient` (the same calls awaited, but the WebSocket streams and the node agent's):
`async with AsyncClient(url, key) as api:`.
"""

from suanli.client.aio import AsyncClient
from suanli.client.client import (
    BAD_RESPONSE,
    NOT_OURS,
    ApiError,
    Client,
    ClientError,
    ExecWaitTimeout,
    GatewayError,
    InvalidArgument,
    RentalEnded,
    RentalWaitTimeout,
    ServerUnreachable,
)

__all__ = [
    "BAD_RESPONSE",
    "NOT_OURS",
    "ApiError",
    "AsyncClient",
    "Client",
    "ClientError",
    "ExecWaitTimeout",
    "GatewayError",
    "InvalidArgument",
    "RentalEnded",
    "RentalWaitTimeout",
    "ServerUnreachable",
]
