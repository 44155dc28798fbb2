"""What the plain calls on a rental's commands and port forwards send (see `calls`), for `ExecCalls` and
`AsyncExecCalls`; an argument its request model refuses is an `InvalidArgument`. Waiting for a command is
`rental_rules`'."""

from __future__ import annotations

from collections.abc import Sequence

from suanli.client.calls import Call
from suanli.client.errors import checks_arguments
from suanli.client.transport import segment
from suanli.wire.schemas import ExecCreateRequest, ExecResponse, ForwardCreateRequest


@checks_arguments
def exec_command(
    rental_id: str,
    command: Sequence[str],
    node_rank: int,
    timeout_s: int,
    stdin: bool,
    tty: bool,
    separate_stderr: bool,
) -> Call[ExecResponse]:
    body = ExecCreateRequest(
        command=list(command),
        node_rank=node_rank,
        timeout_s=timeout_s,
        stdin=stdin,
        tty=tty,
        separate_stderr=separate_stderr,
    )
    return Call("POST", f"/v1/rentals/{segment(rental_id)}/execs", ExecResponse, body=body)


@checks_arguments
def forward(rental_id: str, port: int, node_rank: int, timeout_s: int) -> Call[ExecResponse]:
    body = ForwardCreateRequest(port=port, node_rank=node_rank, timeout_s=timeout_s)
    return Call("POST", f"/v1/rentals/{segment(rental_id)}/forwards", ExecResponse, body=body)


def exec_status(rental_id: str, exec_id: str) -> Call[ExecResponse]:
    return Call("GET", f"/v1/rentals/{segment(rental_id)}/execs/{segment(exec_id)}", ExecResponse)


def execs(rental_id: str) -> Call[list[ExecResponse]]:
    return Call("GET", f"/v1/rentals/{segment(rental_id)}/execs", list[ExecResponse])
