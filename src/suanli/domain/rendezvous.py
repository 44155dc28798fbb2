"""A rental's rendezvous port (torchrun's `--master-port`): one that no other live rental on any of its nodes
holds, so two gangs whose rank 0 shares a host never both listen on the same port (on 29500, torchrun's
default, the second failed to bind; on ports hashed from their ids, 1 pair in 9,000 still did)."""

from __future__ import annotations

import hashlib
from collections.abc import Collection

# below Linux's ephemeral ports (32768 on) and torchrun's defaults (29400, 29500)
MASTER_PORTS = range(20_000, 29_000)


def hashed_master_port(rental_id: str) -> int:
    """The port a rental's id points at: its first choice, and an agent's when the server names none."""
    digest = int.from_bytes(hashlib.sha256(rental_id.encode()).digest()[:8], "big")
    return MASTER_PORTS[digest % len(MASTER_PORTS)]


def free_master_port(rental_id: str, taken: Collection[int]) -> int:
    """The first port from the rental's hashed one on (wrapping round the range) that is not `taken` by a
    rental sharing a node with it; the hashed one if every port is taken (9,000 rentals on its nodes)."""
    first = hashed_master_port(rental_id) - MASTER_PORTS.start
    for step in range(len(MASTER_PORTS)):
        port = MASTER_PORTS[(first + step) % len(MASTER_PORTS)]
        if port not in taken:
            return port
    return MASTER_PORTS[first]
