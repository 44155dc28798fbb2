"""Which slice positions an allocation books: the rows behind the store's UNIQUE (node, gpu_index, slot).

Positions depend on the node's GPU mode, which never mixes on one GPU:
- `whole` GPUs: a rental books slot 0 of each GPU it takes;
- `mig` GPUs: an instance books its placement slots (NVIDIA's table), so overlapping instances collide;
- `shared` GPUs: compute is cut into 100 units of 10 milli (1%, the granularity of MPS's
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); a share books `milli / 10` free units, a whole GPU books all 100.
So two bookings of one whole GPU, or a share on a GPU that is rented whole, always share a row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from suanli.app.errors import BookingConflict
from suanli.app.records import Booking
from suanli.domain.catalog import GpuModel
from suanli.domain.inventory import GpuMode, Node
from suanli.domain.plan import NodeAllocation

SHARE_UNIT_MILLI = 10
SHARE_UNITS = 100
WHOLE_SLOT = 0


def bookings_for(
    allocations: Sequence[NodeAllocation],
    nodes: Callable[[str], tuple[Node, GpuModel]],
    used_units: Callable[[str, int], set[int]],
) -> list[Booking]:
    """The rows an allocation books; `used_units(node, gpu)` reads share units already booked."""
    rows: list[Booking] = []
    taken_here: dict[tuple[str, int], set[int]] = {}
    for allocation in allocations:
        node, model = nodes(allocation.node)
        for piece in allocation.slices:
            gpu = piece.gpu_index
            if piece.mig_profile is not None and piece.mig_start is not None and model.mig is not None:
                slots = model.mig.profile(piece.mig_profile).slots_at(piece.mig_start)
                rows.extend(Booking(node.name, gpu, slot) for slot in slots)
            elif node.gpu_mode is GpuMode.SHARED:
                if piece.mig_profile is None and piece.milli == 1000:
                    units: list[int] = list(range(SHARE_UNITS))
                else:
                    key = (node.name, gpu)
                    if key not in taken_here:
                        taken_here[key] = set(used_units(node.name, gpu))
                    free = [u for u in range(SHARE_UNITS) if u not in taken_here[key]]
                    need = -(-piece.milli // SHARE_UNIT_MILLI)
                    if len(free) < need:
                        raise BookingConflict(f"GPU {gpu} of {node.name} has {len(free)} free share units")
                    units = free[:need]
                taken_here.setdefault((node.name, gpu), set()).update(units)
                rows.extend(Booking(node.name, gpu, unit) for unit in units)
            else:
                rows.append(Booking(node.name, gpu, WHOLE_SLOT))
    return rows
