"""Free GPUs the queue cannot use because they lie in pieces: on a node that some waiting request could run
on (model, mode, region, constraints), but where none of those requests fits what is free (fragmentation
measured against the pending queue rather than a typical mix)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from suanli.domain.capacity import FULL_MILLI
from suanli.domain.request import Request
from suanli.domain.scheduler import nominate
from suanli.domain.snapshot import Snapshot


def scattered_gpus(snapshot: Snapshot, waiting: Sequence[Request], excluded: Collection[str] = ()) -> float:
    """The free GPUs of schedulable nodes outside `excluded` (the blocked head's reserved nodes) on which
    some of `waiting` could run but none fits what is free: whole free GPUs for whole-GPU shapes, one GPU's
    free share for shares (a MIG slice counts as a whole GPU; CPU and memory aside)."""
    whole: dict[int, float] = {}  # node class -> the fewest whole GPUs a request that may run there needs
    share: dict[int, float] = {}  # node class -> the smallest share (milli) such a request needs
    for request in waiting:
        need = request.gpus_per_node
        for class_id in nominate(snapshot, request)[0]:
            if need >= 1:
                whole[class_id] = min(whole.get(class_id, math.inf), math.ceil(need))
            else:
                share[class_id] = min(share.get(class_id, math.inf), need * FULL_MILLI)
    skip = {snapshot.by_name[name].index for name in excluded if name in snapshot.by_name}
    free_milli = 0
    for class_id in whole.keys() | share.keys():
        least_whole, least_share = whole.get(class_id, math.inf), share.get(class_id, math.inf)
        for state_id, members in snapshot.groups[class_id].items():
            gpus = snapshot.state_keys[state_id][2]
            free_whole = sum(1 for entry in gpus if entry[0] >= FULL_MILLI)
            if free_whole >= least_whole or max((e[0] for e in gpus), default=0) >= least_share:
                continue  # one of them fits here
            outside = sum(1 for index in members if index not in skip)
            free_milli += outside * sum(entry[0] for entry in gpus)
    return free_milli / FULL_MILLI
