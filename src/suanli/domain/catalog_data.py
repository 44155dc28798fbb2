"""The built-in GPU catalogue: vendor-published figures, each with where it comes from.

Conventions for every entry:

* `memory_gib` is the capacity the vendor prints (decimal "GB" on datasheets, or the number in a MIG
  profile name); it is not re-derived from nvidia-smi's usable MiB.
* `bf16_dense_tflops` is the dense Tensor/Matrix-core BF16 rate, i.e. half of any "with sparsity"
  figure. Parts without BF16 (Pascal, Volta, Turing) carry their FP16 Tensor (or FP16) rate as a
  stand-in; their source says so.
* `tdp_watts` is the maximum board/module power the vendor lists for the named form factor.
* `nvlink` is True only for NVIDIA NVLink (SXM or bridge); AMD Infinity Fabric, Huawei HCCS and Biren
  BLink count as False here, and their sources name the link.
* `mig` follows the NVIDIA MIG User Guide, "Supported MIG Profiles", with placements as
  `nvidia-smi mig -lgipp` reports them (start slot and size in memory slots). `+me` (media-extension)
  variants are not listed: they occupy the same slots as their base profile.
* `runtime_devices_per_card` is how many devices the vendor's runtime numbers for one card (1 unless the
  card holds several dies that software sees apart, as an MI250X's two GCDs); the catalogue sizes and prices
  the card, and the agent makes all of a rented card's devices visible.
* Where a figure is undisclosed the source says so and states the assumption used instead.

Standard library only; no I/O.
"""

from __future__ import annotations

from types import MappingProxyType

from suanli.domain.catalog import Catalog, GpuModel, MigGeometry, MigProfile, Vendor

_MIG_GUIDE = "NVIDIA MIG User Guide, Supported MIG Profiles"
_NO_MIG_NVIDIA = f"no MIG: not among the MIG-capable GPUs in the {_MIG_GUIDE} section"
_NO_MIG_OTHER = "no MIG: MIG is an NVIDIA-only feature"
_ONE_DEVICE_PER_CARD = "one die per card: its runtime numbers the card as one device"

# (compute slices, placement slots, valid start slots) for the 8-slot/7-slice GPUs, in the order
# 1g, 1g double-memory, 2g, 3g, 4g, 7g.
_EIGHT_SLOT_SHAPES: tuple[tuple[int, int, tuple[int, ...]], ...] = (
    (1, 1, (0, 1, 2, 3, 4, 5, 6)),
    (1, 2, (0, 2, 4, 6)),
    (2, 2, (0, 2, 4)),
    (3, 4, (0, 4)),
    (4, 4, (0,)),
    (7, 8, (0,)),
)

# The same for the A30 (4 slots, 4 slices), in the order 1g, 2g, 4g.
_FOUR_SLOT_SHAPES: tuple[tuple[int, int, tuple[int, ...]], ...] = (
    (1, 1, (0, 1, 2, 3)),
    (2, 2, (0, 2)),
    (4, 4, (0,)),
)


def _profile_memory_gib(name: str) -> float:
    """The memory in a profile name: "3g.40gb" -> 40.0."""
    return float(name.split(".", 1)[1].removesuffix("gb"))


def _mig(
    shapes: tuple[tuple[int, int, tuple[int, ...]], ...],
    slot_count: int,
    slice_count: int,
    names: tuple[str, ...],
) -> MigGeometry:
    if len(names) != len(shapes):
        raise ValueError(f"expected {len(shapes)} profile names, got {names}")
    profiles = tuple(
        MigProfile(
            name=name,
            compute_slices=compute,
            placement_slots=slots,
            memory_gib=_profile_memory_gib(name),
            valid_starts=starts,
        )
        for name, (compute, slots, starts) in zip(names, shapes, strict=True)
    )
    return MigGeometry(placement_slot_count=slot_count, compute_slice_count=slice_count, profiles=profiles)


def _mig_8_slot(one: str, one_double: str, two: str, three: str, four: str, seven: str) -> MigGeometry:
    """NVIDIA's 8-memory-slot, 7-compute-slice layout (A100, H100, H200, B200)."""
    return _mig(_EIGHT_SLOT_SHAPES, 8, 7, (one, one_double, two, three, four, seven))


def _mig_4_slot(one: str, two: str, four: str) -> MigGeometry:
    """NVIDIA's 4-memory-slot, 4-compute-slice layout (A30)."""
    return _mig(_FOUR_SLOT_SHAPES, 4, 4, (one, two, four))


def _gpu(
    name: str,
    family: str,
    vendor: Vendor,
    *,
    memory_gib: tuple[float, str],
    bf16_dense_tflops: tuple[float, str],
    tdp_watts: tuple[int, str],
    nvlink: tuple[bool, str],
    mig: tuple[MigGeometry | None, str],
    runtime_devices_per_card: tuple[int, str] = (1, _ONE_DEVICE_PER_CARD),
) -> GpuModel:
    """One entry; every figure is given together with its source so none can be left without one."""
    return GpuModel(
        name=name,
        family=family,
        vendor=vendor,
        memory_gib=float(memory_gib[0]),
        bf16_dense_tflops=float(bf16_dense_tflops[0]),
        tdp_watts=tdp_watts[0],
        nvlink=nvlink[0],
        mig=mig[0],
        runtime_devices_per_card=runtime_devices_per_card[0],
        sources=MappingProxyType(
            {
                "memory_gib": memory_gib[1],
                "bf16_dense_tflops": bf16_dense_tflops[1],
                "tdp_watts": tdp_watts[1],
                "nvlink": nvlink[1],
                "mig": mig[1],
                "runtime_devices_per_card": runtime_devices_per_card[1],
            }
        ),
    )


# --- NVIDIA data-centre and workstation parts -------------------------------------------------------------

_T4 = _gpu(
    "T4",
    "T4",
    Vendor.NVIDIA,
    memory_gib=(16, "NVIDIA T4 Tensor Core GPU datasheet (2019): 16 GB GDDR6"),
    bf16_dense_tflops=(
        65.0,
        "NVIDIA T4 datasheet: Turing has no BF16; FP16 mixed-precision Tensor 65 TFLOPS used as stand-in "
        "(no sparsity on Turing)",
    ),
    tdp_watts=(70, "NVIDIA T4 datasheet: max power 70 W"),
    nvlink=(False, "NVIDIA T4 datasheet: PCIe Gen3 x16 only, no NVLink"),
    mig=(None, _NO_MIG_NVIDIA),
)

_A10 = _gpu(
    "A10",
    "A10",
    Vendor.NVIDIA,
    memory_gib=(24, "NVIDIA A10 Tensor Core GPU datasheet (2021): 24 GB GDDR6"),
    bf16_dense_tflops=(125.0, "NVIDIA A10 datasheet: BF16 Tensor 125 TFLOPS dense (250 with sparsity)"),
    tdp_watts=(150, "NVIDIA A10 datasheet: max TDP 150 W"),
    nvlink=(False, "NVIDIA A10 datasheet: PCIe Gen4 only, no NVLink"),
    mig=(None, _NO_MIG_NVIDIA),
)

_L4 = _gpu(
    "L4",
    "L4",
    Vendor.NVIDIA,
    memory_gib=(24, "NVIDIA L4 Tensor Core GPU datasheet (2023): 24 GB GDDR6"),
    bf16_dense_tflops=(121.0, "NVIDIA L4 datasheet: BF16 Tensor 242 TFLOPS with sparsity, halved for dense"),
    tdp_watts=(72, "NVIDIA L4 datasheet: max TDP 72 W"),
    nvlink=(False, "NVIDIA L4 datasheet: PCIe Gen4 only, no NVLink"),
    mig=(None, _NO_MIG_NVIDIA),
)

_L40S = _gpu(
    "L40S",
    "L40S",
    Vendor.NVIDIA,
    memory_gib=(48, "NVIDIA L40S GPU datasheet (2023): 48 GB GDDR6 with ECC"),
    bf16_dense_tflops=(362.05, "NVIDIA L40S datasheet: BF16 Tensor 362.05 TFLOPS dense (733 with sparsity)"),
    tdp_watts=(350, "NVIDIA L40S datasheet: max power 350 W"),
    nvlink=(False, "NVIDIA L40S datasheet: no NVLink support"),
    mig=(None, _NO_MIG_NVIDIA),
)

_A30 = _gpu(
    "A30-24GB",
    "A30",
    Vendor.NVIDIA,
    memory_gib=(24, "NVIDIA A30 Tensor Core GPU datasheet (2021): 24 GB HBM2"),
    bf16_dense_tflops=(165.0, "NVIDIA A30 datasheet: BF16 Tensor 165 TFLOPS dense (330 with sparsity)"),
    tdp_watts=(165, "NVIDIA A30 datasheet: max TDP 165 W"),
    nvlink=(True, "NVIDIA A30 datasheet: third-generation NVLink bridge, 200 GB/s, two GPUs"),
    mig=(
        _mig_4_slot("1g.6gb", "2g.12gb", "4g.24gb"),
        f"{_MIG_GUIDE}, A30 (A30-24GB): 1g.6gb x4, 2g.12gb x2, 4g.24gb x1 on 4 memory slots",
    ),
)

_A100_40 = _gpu(
    "A100-40GB",
    "A100",
    Vendor.NVIDIA,
    memory_gib=(40, "NVIDIA A100 Tensor Core GPU datasheet (2021), A100 40GB SXM column: 40 GB HBM2"),
    bf16_dense_tflops=(312.0, "NVIDIA A100 datasheet: BF16 Tensor 312 TFLOPS dense (624 with sparsity)"),
    tdp_watts=(
        400,
        "NVIDIA A100 datasheet, SXM column: 400 W (assumes SXM4; the 40 GB PCIe card is 250 W)",
    ),
    nvlink=(True, "NVIDIA A100 datasheet: NVLink 600 GB/s (SXM4; PCIe cards via 2-GPU bridge)"),
    mig=(
        _mig_8_slot("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
        f"{_MIG_GUIDE}, A100 (A100-SXM4-40GB table)",
    ),
)

_A100_80 = _gpu(
    "A100-80GB",
    "A100",
    Vendor.NVIDIA,
    memory_gib=(80, "NVIDIA A100 Tensor Core GPU datasheet (2021), A100 80GB SXM column: 80 GB HBM2e"),
    bf16_dense_tflops=(312.0, "NVIDIA A100 datasheet: BF16 Tensor 312 TFLOPS dense (624 with sparsity)"),
    tdp_watts=(
        400,
        "NVIDIA A100 datasheet, SXM column: 400 W (assumes SXM4; the 80 GB PCIe card is 300 W)",
    ),
    nvlink=(True, "NVIDIA A100 datasheet: NVLink 600 GB/s (SXM4; PCIe cards via 2-GPU bridge)"),
    mig=(
        _mig_8_slot("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        f"{_MIG_GUIDE}, A100 (A100-SXM4-80GB profile names)",
    ),
)

_H100_MIG_NAMES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")

_H100_SXM = _gpu(
    "H100-SXM-80GB",
    "H100",
    Vendor.NVIDIA,
    memory_gib=(80, "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column: 80 GB HBM3"),
    bf16_dense_tflops=(
        989.5,
        "NVIDIA H100 datasheet, SXM column: BF16 Tensor 1,979 TFLOPS with sparsity, halved for dense",
    ),
    tdp_watts=(700, "NVIDIA H100 datasheet, SXM column: max TDP up to 700 W (configurable)"),
    nvlink=(True, "NVIDIA H100 datasheet, SXM column: NVLink 900 GB/s"),
    mig=(_mig_8_slot(*_H100_MIG_NAMES), f"{_MIG_GUIDE}, H100 (H100-SXM5-80GB)"),
)

_H100_PCIE = _gpu(
    "H100-PCIe",
    "H100",
    Vendor.NVIDIA,
    memory_gib=(80, "NVIDIA H100 PCIe product brief PB-11133-001 (2022): 80 GB HBM2e"),
    bf16_dense_tflops=(
        756.5,
        "NVIDIA H100 datasheet (2022), PCIe column: BF16 Tensor 1,513 TFLOPS with sparsity, halved for dense",
    ),
    tdp_watts=(350, "NVIDIA H100 PCIe product brief PB-11133-001: max TDP 350 W (datasheet: 300-350 W)"),
    nvlink=(True, "NVIDIA H100 datasheet, PCIe column: NVLink bridge 600 GB/s, two GPUs"),
    mig=(_mig_8_slot(*_H100_MIG_NAMES), f"{_MIG_GUIDE}, H100 (H100-PCIE-80GB)"),
)

_H200 = _gpu(
    "H200-141GB",
    "H200",
    Vendor.NVIDIA,
    memory_gib=(141, "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column: 141 GB HBM3e"),
    bf16_dense_tflops=(
        989.5,
        "NVIDIA H200 datasheet, SXM column: BF16 Tensor 1,979 TFLOPS with sparsity, halved for dense",
    ),
    tdp_watts=(
        700,
        "NVIDIA H200 datasheet, SXM column: max TDP up to 700 W (assumes SXM; H200 NVL is up to 600 W)",
    ),
    nvlink=(True, "NVIDIA H200 datasheet, SXM column: NVLink 900 GB/s"),
    mig=(
        _mig_8_slot("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
        f"{_MIG_GUIDE}, H200 (H200-SXM5-141GB)",
    ),
)

_B200 = _gpu(
    "B200",
    "B200",
    Vendor.NVIDIA,
    memory_gib=(
        180,
        "NVIDIA DGX/HGX B200 datasheet: 1,440 GB HBM3e across 8 GPUs = 180 GB each (192 GB at 2024 launch)",
    ),
    bf16_dense_tflops=(
        2250.0,
        "NVIDIA HGX B200 datasheet: FP16/BF16 Tensor 36 PFLOPS with sparsity for 8 GPUs; per GPU, halved "
        "for dense",
    ),
    tdp_watts=(1000, "NVIDIA Blackwell architecture technical brief: HGX B200 GPU at 1,000 W"),
    nvlink=(True, "NVIDIA HGX B200 datasheet: fifth-generation NVLink 1.8 TB/s per GPU"),
    mig=(
        _mig_8_slot("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
        f"{_MIG_GUIDE}, B200 (B200-180GB)",
    ),
)

_RTX_4090 = _gpu(
    "RTX-4090",
    "RTX4090",
    Vendor.NVIDIA,
    memory_gib=(24, "NVIDIA Ada Lovelace architecture whitepaper v1.0 (2022), RTX 4090: 24 GB GDDR6X"),
    bf16_dense_tflops=(
        165.2,
        "NVIDIA Ada whitepaper, appendix A: RTX 4090 peak BF16 Tensor 165.2 TFLOPS dense with FP32 "
        "accumulate (330.4 with sparsity)",
    ),
    tdp_watts=(450, "NVIDIA Ada whitepaper: RTX 4090 total graphics power 450 W"),
    nvlink=(False, "NVIDIA GeForce RTX 4090 specifications: no NVLink (dropped on Ada GeForce)"),
    mig=(None, _NO_MIG_NVIDIA),
)

# --- Other vendors --------------------------------------------------------------------------------------

_MI250X = _gpu(
    "MI250X",
    "MI250X",
    Vendor.AMD,
    memory_gib=(
        128,
        "AMD Instinct MI250X specifications: 128 GB HBM2e (two GCDs, each seen by software as a 64 GB GPU)",
    ),
    bf16_dense_tflops=(
        383.0,
        "AMD Instinct MI250X specifications: peak BF16 383 TFLOPS (CDNA 2: no sparsity)",
    ),
    tdp_watts=(560, "AMD Instinct MI250X specifications: total board power 500 W, 560 W peak; 560 W taken"),
    nvlink=(False, "AMD Instinct MI250X: AMD Infinity Fabric links, not NVLink"),
    mig=(None, _NO_MIG_OTHER),
    runtime_devices_per_card=(
        2,
        "AMD Instinct MI250 / MI250X system acceptance guide (instinct.docs.amd.com): each OAM hosts two "
        "GCDs, each enumerated as an independent GPU by ROCm tools; a card's two taken as adjacent indices",
    ),
)

_MI300X = _gpu(
    "MI300X",
    "MI300X",
    Vendor.AMD,
    memory_gib=(192, "AMD Instinct MI300X data sheet (2023): 192 GB HBM3"),
    bf16_dense_tflops=(
        1307.4,
        "AMD Instinct MI300X data sheet: peak BF16 1,307.4 TFLOPS dense (2,614.9 with structured sparsity)",
    ),
    tdp_watts=(750, "AMD Instinct MI300X data sheet: total board power 750 W"),
    nvlink=(False, "AMD Instinct MI300X: AMD Infinity Fabric links, not NVLink"),
    mig=(None, f"{_NO_MIG_OTHER}; AMD compute/memory partitioning (CPX/NPS) is not modelled"),
    runtime_devices_per_card=(
        1,
        "AMD GIM 8.5.0.K release note (amd/MxGPU-Virtualization): MI300X's default compute partitioning is "
        "SPX, one device per card; CPX/DPX partitioning is not modelled",
    ),
)

_ASCEND_910B = _gpu(
    "Ascend-910B",
    "Ascend910B",
    Vendor.HUAWEI,
    memory_gib=(
        64,
        "Huawei publishes no per-chip 910B datasheet; 64 GB HBM2e as listed by Gitee AI compute docs "
        "(Ascend 910B); undisclosed by vendor, assumption",
    ),
    bf16_dense_tflops=(
        280.0,
        "Undisclosed by Huawei per chip; FP16 280 TFLOPS per Gitee AI compute docs (Ascend 910B), lowest of "
        "the reported 910B variants; BF16 assumed to run at the FP16 rate",
    ),
    tdp_watts=(400, "Undisclosed by Huawei per chip; assumed 400 W, the commonly reported 910B module power"),
    nvlink=(False, "Huawei HCCS chip-to-chip links, not NVLink"),
    mig=(None, _NO_MIG_OTHER),
)

_BR100 = _gpu(
    "BR100",
    "BR100",
    Vendor.BIREN,
    memory_gib=(64, "Biren BR100 launch specifications (Hot Chips 34, Aug 2022): 64 GB HBM2e"),
    bf16_dense_tflops=(
        1024.0,
        "Biren BR100 launch specifications: BF16 1,024 TFLOPS; Biren states no sparsity, taken as dense",
    ),
    tdp_watts=(550, "Biren BR100 launch specifications: 550 W OAM module"),
    nvlink=(False, "Biren BR100: proprietary BLink interconnect, not NVLink"),
    mig=(None, _NO_MIG_OTHER),
)

# --- Models named in the Alibaba GPU trace (clusterdata cluster-trace-gpu-v2023) -----------------------

_TRACE_FORM_FACTOR = (
    "the Alibaba trace does not name the form factor; PCIe assumed (lower figures, no NVLink)"
)

_P100 = _gpu(
    "P100",
    "P100",
    Vendor.NVIDIA,
    memory_gib=(16, "NVIDIA Tesla P100 datasheet (2016): 16 GB CoWoS HBM2 (PCIe 16 GB column)"),
    bf16_dense_tflops=(
        18.7,
        "NVIDIA Tesla P100 datasheet, PCIe column: no BF16 and no Tensor cores on Pascal; FP16 18.7 TFLOPS "
        "used as stand-in (SXM2: 21.2)",
    ),
    tdp_watts=(250, f"NVIDIA Tesla P100 datasheet, PCIe column: 250 W (SXM2: 300 W); {_TRACE_FORM_FACTOR}"),
    nvlink=(False, f"NVIDIA Tesla P100 datasheet: PCIe card has no NVLink (SXM2 has); {_TRACE_FORM_FACTOR}"),
    mig=(None, _NO_MIG_NVIDIA),
)

_V100_BF16 = (
    112.0,
    "NVIDIA Tesla V100 datasheet, PCIe column: no BF16 on Volta; FP16 Tensor 112 TFLOPS used as stand-in "
    "(SXM2: 125)",
)
_V100_TDP = (250, f"NVIDIA Tesla V100 datasheet, PCIe column: 250 W (SXM2: 300 W); {_TRACE_FORM_FACTOR}")
_V100_NVLINK = (
    False,
    f"NVIDIA Tesla V100 datasheet: PCIe card has no NVLink (SXM2 has); {_TRACE_FORM_FACTOR}",
)

_V100M16 = _gpu(
    "V100M16",
    "V100",
    Vendor.NVIDIA,
    memory_gib=(16, "NVIDIA Tesla V100 datasheet: 16 GB HBM2 variant (trace name V100M16)"),
    bf16_dense_tflops=_V100_BF16,
    tdp_watts=_V100_TDP,
    nvlink=_V100_NVLINK,
    mig=(None, _NO_MIG_NVIDIA),
)

_V100M32 = _gpu(
    "V100M32",
    "V100",
    Vendor.NVIDIA,
    memory_gib=(32, "NVIDIA Tesla V100 datasheet: 32 GB HBM2 variant (trace name V100M32)"),
    bf16_dense_tflops=_V100_BF16,
    tdp_watts=_V100_TDP,
    nvlink=_V100_NVLINK,
    mig=(None, _NO_MIG_NVIDIA),
)

_UNDISCLOSED = (
    "Undisclosed: Alibaba cluster-trace-gpu-v2023 README calls G1, G2, G3 undisclosed internal GPU codes"
)


def _undisclosed(name: str) -> GpuModel:
    """Placeholder for an undisclosed Alibaba GPU type: conservative figures, each flagged as assumed."""
    return _gpu(
        name,
        name,
        Vendor.UNDISCLOSED,
        memory_gib=(
            16,
            f"{_UNDISCLOSED}; assumed 16 GB, the smallest memory among the trace's disclosed GPUs "
            "(T4, P100, V100M16)",
        ),
        bf16_dense_tflops=(
            18.7,
            f"{_UNDISCLOSED}; assumed 18.7 TFLOPS, the lowest rate among the trace's disclosed GPUs "
            "(P100 PCIe FP16)",
        ),
        tdp_watts=(300, f"{_UNDISCLOSED}; assumed 300 W, the PCIe CEM ceiling for an add-in card"),
        nvlink=(False, f"{_UNDISCLOSED}; assumed no NVLink"),
        mig=(None, f"{_UNDISCLOSED}; assumed no MIG"),
        runtime_devices_per_card=(1, f"{_UNDISCLOSED}; assumed one device per card"),
    )


CATALOG = Catalog(
    (
        _T4,
        _A10,
        _L4,
        _L40S,
        _A30,
        _A100_40,
        _A100_80,
        _H100_SXM,
        _H100_PCIE,
        _H200,
        _B200,
        _RTX_4090,
        _MI250X,
        _MI300X,
        _ASCEND_910B,
        _BR100,
        _P100,
        _V100M16,
        _V100M32,
        _undisclosed("G1"),
        _undisclosed("G2"),
        _undisclosed("G3"),
    )
)
