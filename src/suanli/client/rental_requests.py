"""What the plain calls on one rental send (see `calls`), for `RentalCalls` and `AsyncRentalCalls`: create,
dry run, look at, stop, bid, resize, a page of output, its runs and GPUs; an argument its request model
refuses is an `InvalidArgument`. What following output and waiting decide is `rental_rules`'."""

from __future__ import annotations

from suanli.client.calls import Call, created
from suanli.client.errors import checks_arguments
from suanli.client.transport import segment
from suanli.wire.agent_schemas import (
    LogResponse,
    RentalGpuHistoryResponse,
    RentalGpuResponse,
    RentalRunResponse,
)
from suanli.wire.schemas import (
    RentalBidRequest,
    RentalCreateRequest,
    RentalDryRunResponse,
    RentalResizeRequest,
    RentalResponse,
)


def create_rental(request: RentalCreateRequest, idempotency_key: str | None) -> Call[RentalResponse]:
    return created("/v1/rentals", RentalResponse, request, idempotency_key)


def dry_run_rental(request: RentalCreateRequest) -> Call[RentalDryRunResponse]:
    return Call("POST", "/v1/rentals/dry-run", RentalDryRunResponse, body=request, retry=True)


def rental(rental_id: str) -> Call[RentalResponse]:
    return Call("GET", f"/v1/rentals/{segment(rental_id)}", RentalResponse)


def stop(rental_id: str) -> Call[RentalResponse]:
    return Call("POST", f"/v1/rentals/{segment(rental_id)}/stop", RentalResponse, retry=True)


@checks_arguments
def set_bid(rental_id: str, bid_micros_per_gpu_hour: int) -> Call[RentalResponse]:
    body = RentalBidRequest(bid_micros_per_gpu_hour=bid_micros_per_gpu_hour)
    return Call("PUT", f"/v1/rentals/{segment(rental_id)}/bid", RentalResponse, body=body)


@checks_arguments
def resize(rental_id: str, nodes: int | None, gpus: int | None) -> Call[RentalResponse]:
    body = RentalResizeRequest(nodes=nodes, gpus=gpus)
    return Call("PATCH", f"/v1/rentals/{segment(rental_id)}", RentalResponse, body=body)


def logs(rental_id: str, offset: int, node: str | None, tail: int | None) -> Call[LogResponse]:
    params = {"offset": str(offset)} | ({"node": node} if node is not None else {})
    if tail is not None:
        params["tail"] = str(tail)
    return Call("GET", f"/v1/rentals/{segment(rental_id)}/logs", LogResponse, params=params)


def rental_runs(rental_id: str) -> Call[list[RentalRunResponse]]:
    return Call("GET", f"/v1/rentals/{segment(rental_id)}/runs", list[RentalRunResponse])


def rental_gpus(rental_id: str) -> Call[list[RentalGpuResponse]]:
    return Call("GET", f"/v1/rentals/{segment(rental_id)}/gpus", list[RentalGpuResponse])


def rental_gpu_history(rental_id: str, minutes: int) -> Call[list[RentalGpuHistoryResponse]]:
    path = f"/v1/rentals/{segment(rental_id)}/gpus/history"
    return Call("GET", path, list[RentalGpuHistoryResponse], params={"minutes": str(minutes)})
