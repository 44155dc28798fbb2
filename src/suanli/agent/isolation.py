"""A workload's environment: which devices it sees, its MPS limits, and the rental's own variables.

`workload_env(assignment, inventory, notice_file=...)` is pure. It guarantees:

* The vendor's runtime sees exactly the rental's devices (`VISIBLE_DEVICES`, by the catalogue's vendor of the
  host's devices). NVIDIA: `CUDA_VISIBLE_DEVICES`, by UUID as the probe reported them: the GPU UUID for a
  whole GPU or a share, the MIG device UUID for a MIG slice. On a `DeclaredProbe` host these are the declared
  (fake) UUIDs, the same ones the agent registered, so the server, logs and the workload all name a device
  the same way; no real CUDA runs there, so nothing needs indices. AMD: `ROCR_VISIBLE_DEVICES` (ROCm's
  runtime, under HIP), Huawei Ascend: `ASCEND_RT_VISIBLE_DEVICES` (CANN), each by the host's device index,
  since neither runtime reads `CUDA_VISIBLE_DEVICES`; a card whose runtime numbers each of its dies
  (`GpuModel.runtime_devices_per_card`: an MI250X's two GCDs) is all of them, card i = devices 2i, 2i+1.
  Another vendor's devices are refused: no variable is known that limits what its workload sees.
* For a share (milli < 1000, no MIG profile; NVIDIA only), NVIDIA MPS limits:
  `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` = milli / 10 (whole percent, at least 1) and, for a share that holds
  GPU memory, `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` = `<GPU UUID>=<MiB>M` per GPU, comma-separated (a share that
  holds none, the default, gets no memory limit: 0M would let it pin nothing). (NVIDIA's k8s device plugin
  keys this limit by index because of a driver issue with UUID keys; check on real MPS hosts.)
* `SUANLI_RENTAL_ID`, `SUANLI_NOTICE_FILE` (where a preemption notice will appear, JSON) and
  `SUANLI_PLACEMENT` (1 on its first placement; more once re-queued, as a rental that checkpoints is when
  preempted: it resumes from its checkpoint, which must be where its next node can read it).
* Where the server names the rental's nodes (`Assignment.peers`, rank order): `SUANLI_NNODES`,
  `SUANLI_NODE_RANK`, `SUANLI_NODES` (host names, comma-separated), `SUANLI_MASTER_ADDR` (rank 0's),
  `SUANLI_MASTER_PORT` (the rental's own, `master_port`: the server picks one no other live rental on its
  nodes holds, `domain/rendezvous.py`, so two gangs whose rank 0 shares a host never both bind one),
  `SUANLI_GPUS_PER_NODE` (devices visible here), `SUANLI_NODES_FILE` (the same as JSON, rewritten when the
  rental grows or shrinks) and `SUANLI_RESTART_COUNT` (how many times the workload was restarted under
  `on-failure`: on all the rental's nodes, or on its one node; as torchrun's `TORCHELASTIC_RESTART_COUNT`,
  0 on the first run), enough for `torchrun
  --nnodes $SUANLI_NNODES --node-rank $SUANLI_NODE_RANK --master-addr $SUANLI_MASTER_ADDR --master-port
  $SUANLI_MASTER_PORT --nproc-per-node $SUANLI_GPUS_PER_NODE`.
* The rental's variables are added, but may not set any isolation variable (`ISOLATION_VARIABLES`, or any
  `SUANLI_` or `CUDA_MPS_` name): that raises `IsolationError`, never silently overrides.

Refused with `IsolationError`: a slice on a GPU the host lacks, a MIG slice without a matching MIG device, a
whole GPU that is in MIG mode, more than one MIG slice (CUDA enumerates one MIG instance per process), shares
mixed with other slices, and shares of different sizes.
"""

from __future__ import annotations

from collections.abc import Mapping

from suanli.agent.assignment import Assignment
from suanli.agent.probe import GpuDevice, HostInventory, MigDevice, ProbeError
from suanli.domain.catalog import Vendor
from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import CatalogError, SuanliError
from suanli.domain.plan import Slice
from suanli.domain.rendezvous import hashed_master_port
from suanli.domain.workload_env import VISIBLE_DEVICES, env_problem


def master_port(assignment: Assignment) -> int:
    """The rental's rendezvous port on its rank 0's host, the same on every rank: the one the server chose
    (no other live rental on its nodes holds it), else the one its id points at."""
    return assignment.master_port or hashed_master_port(assignment.rental_id)


class IsolationError(SuanliError):
    """The rental cannot be isolated on this host as assigned, or its env tries to override isolation."""


def workload_env(
    assignment: Assignment, inventory: HostInventory, *, notice_file: str, nodes_file: str = ""
) -> dict[str, str]:
    """The variables to add to the workload's environment (the executor decides what it inherits)."""
    check_user_env(assignment.env)
    env = dict(assignment.env)
    env.update(device_env(assignment.slices, inventory))
    env["SUANLI_RENTAL_ID"] = assignment.rental_id
    env["SUANLI_NOTICE_FILE"] = notice_file
    env["SUANLI_PLACEMENT"] = str(assignment.placement)
    if assignment.peers:
        env["SUANLI_NNODES"] = str(len(assignment.peers))
        env["SUANLI_NODE_RANK"] = str(assignment.node_rank)
        env["SUANLI_NODES"] = ",".join(assignment.peers)
        env["SUANLI_MASTER_ADDR"] = assignment.peers[0]
        env["SUANLI_MASTER_PORT"] = str(master_port(assignment))
        env["SUANLI_GPUS_PER_NODE"] = str(_visible_device_count(assignment.slices, inventory))
        env["SUANLI_NODES_FILE"] = nodes_file
        env["SUANLI_RESTART_COUNT"] = str(assignment.attempt)
    return env


def check_user_env(env: Mapping[str, str]) -> None:
    """Raise IsolationError for a bad variable name or value, or one that would override isolation."""
    if (problem := env_problem(env)) is not None:
        raise IsolationError(problem)


def device_env(slices: tuple[Slice, ...], inventory: HostInventory) -> dict[str, str]:
    """The vendor's visible-devices variable and, for shares, the MPS limits; {"CUDA_VISIBLE_DEVICES": ""}
    for no slices."""
    devices = visible_devices(slices, inventory)
    vendor = device_vendor(slices, inventory)
    if vendor is not Vendor.NVIDIA:
        if any(_is_share(s) or s.mig_profile is not None for s in slices):
            raise IsolationError(f"shares and MIG slices need NVIDIA GPUs; these are {vendor.value}'s")
        return {VISIBLE_DEVICES[vendor]: ",".join(map(str, runtime_device_indices(slices, inventory)))}
    env = {"CUDA_VISIBLE_DEVICES": ",".join(devices)}
    shares = [s for s in slices if _is_share(s)]
    if shares:
        env.update(_mps_env(shares, list(devices)))
    return env


def visible_devices(slices: tuple[Slice, ...], inventory: HostInventory) -> tuple[str, ...]:
    """The rental's devices on this host by UUID (GPU, or MIG device for a MIG slice), in slice order:
    IsolationError where they cannot be isolated as assigned."""
    shares = [s for s in slices if _is_share(s)]
    if shares and len(shares) != len(slices):
        raise IsolationError(
            "a rental mixes GPU shares with whole GPUs or MIG slices; MPS limits cannot apply"
        )
    migs = [s for s in slices if s.mig_profile is not None]
    if len(migs) > 1:
        raise IsolationError(
            f"{len(migs)} MIG slices in one rental; CUDA enumerates one MIG instance per process"
        )
    return tuple(_device_uuid(s, inventory) for s in slices)


def runtime_device_indices(slices: tuple[Slice, ...], inventory: HostInventory) -> tuple[int, ...]:
    """The runtime's device indices of the rental's cards, in slice order: a card of a model whose runtime
    numbers each of its dies (an MI250X's two GCDs) is all of them, 2i and 2i+1, so two rentals of cards 0
    and 1 never share card 0's halves."""
    return tuple(device for piece in slices for device in _runtime_devices(piece.gpu_index, inventory))


def device_vendor(slices: tuple[Slice, ...], inventory: HostInventory) -> Vendor:
    """Whose runtime the rental's devices answer to (NVIDIA for none, or a model the catalogue lacks: only
    NVML names devices it does not know); IsolationError for a vendor no variable limits, or a mix."""
    vendors = set()
    for piece in slices:
        try:
            vendors.add(CATALOG.get(inventory.gpu(piece.gpu_index).model_name).vendor)
        except CatalogError:
            vendors.add(Vendor.NVIDIA)
        except ProbeError as exc:
            raise IsolationError(str(exc)) from None
    if len(vendors) > 1:
        raise IsolationError(f"a rental's devices are of several vendors ({', '.join(sorted(vendors))})")
    vendor = vendors.pop() if vendors else Vendor.NVIDIA
    if vendor not in VISIBLE_DEVICES:
        raise IsolationError(f"no variable is known to limit which {vendor.value} devices a workload sees")
    return vendor


def _visible_device_count(slices: tuple[Slice, ...], inventory: HostInventory) -> int:
    """How many devices the workload sees: one per slice, or one per die of a card its runtime numbers so."""
    return sum(len(_runtime_devices(piece.gpu_index, inventory)) for piece in slices)


def _runtime_devices(card_index: int, inventory: HostInventory) -> range:
    """The runtime's device indices of one card of the host (the card's own, for a model the catalogue
    lacks: only NVML names devices it does not know)."""
    name = inventory.gpu(card_index).model_name
    if name not in CATALOG:
        return range(card_index, card_index + 1)
    return CATALOG.get(name).runtime_devices(card_index)


def _is_share(piece: Slice) -> bool:
    return piece.mig_profile is None and piece.milli < 1000


def _device_uuid(piece: Slice, inventory: HostInventory) -> str:
    try:
        gpu = inventory.gpu(piece.gpu_index)
    except ProbeError as exc:
        raise IsolationError(str(exc)) from None
    if piece.mig_profile is not None:
        return _mig_device(piece, gpu).uuid
    if gpu.mig_mode:
        raise IsolationError(f"GPU {gpu.index} is in MIG mode; only its MIG devices can be assigned")
    return gpu.uuid


def _mig_device(piece: Slice, gpu: GpuDevice) -> MigDevice:
    found = [
        mig
        for mig in gpu.mig_devices
        if mig.profile == piece.mig_profile and piece.mig_start in (None, mig.start_slot)
    ]
    where = f"{piece.mig_profile}" + ("" if piece.mig_start is None else f" at slot {piece.mig_start}")
    if not found:
        have = ", ".join(f"{m.profile}@{m.start_slot}" for m in gpu.mig_devices) or "none"
        raise IsolationError(f"GPU {gpu.index} has no MIG device {where} (it has {have})")
    if len(found) > 1:
        raise IsolationError(
            f"GPU {gpu.index} has {len(found)} MIG devices {where}; the slice must name a start"
        )
    return found[0]


def _mps_env(shares: list[Slice], devices: list[str]) -> dict[str, str]:
    percentages = {max(1, s.milli // 10) for s in shares}
    if len(percentages) > 1:
        raise IsolationError(
            "shares of different sizes in one rental; MPS has one thread percentage per client"
        )
    limits = ",".join(
        f"{uuid}={s.memory_mib}M" for uuid, s in zip(devices, shares, strict=True) if s.memory_mib > 0
    )  # a share that holds no memory (the default) has no limit: 0M would let it pin nothing
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percentages.pop())}
    if limits:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = limits
    return env
