"""The built-in catalogue: every figure sourced, NVIDIA's MIG tables as published, and model lookup."""

from __future__ import annotations

import pytest

from suanli.domain.catalog import GpuModel, Vendor
from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import CatalogError

FIGURES = ("memory_gib", "bf16_dense_tflops", "tdp_watts", "nvlink", "mig", "runtime_devices_per_card")

ALL_NAMES = (
    "T4",
    "A10",
    "L4",
    "L40S",
    "A30-24GB",
    "A100-40GB",
    "A100-80GB",
    "H100-SXM-80GB",
    "H100-PCIe",
    "H200-141GB",
    "B200",
    "RTX-4090",
    "MI250X",
    "MI300X",
    "Ascend-910B",
    "BR100",
    "P100",
    "V100M16",
    "V100M32",
    "G1",
    "G2",
    "G3",
)

EIGHT_SLOT_MIG = {
    "A100-40GB": ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "A100-80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-SXM-80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-PCIe": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H200-141GB": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    "B200": ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
}
# (compute slices, placement slots, valid starts) per position in the EIGHT_SLOT_MIG tuples.
EIGHT_SLOT_SHAPES = (
    (1, 1, (0, 1, 2, 3, 4, 5, 6)),
    (1, 2, (0, 2, 4, 6)),
    (2, 2, (0, 2, 4)),
    (3, 4, (0, 4)),
    (4, 4, (0,)),
    (7, 8, (0,)),
)
A30_SHAPES = {
    "1g.6gb": (1, 1, (0, 1, 2, 3)),
    "2g.12gb": (2, 2, (0, 2)),
    "4g.24gb": (4, 4, (0,)),
}

# (model, profile, memory GiB, compute slices, placement slots, valid starts)
MIG_ROWS = [
    (model, name, float(name.split(".")[1].removesuffix("gb")), *shape)
    for model, names in EIGHT_SLOT_MIG.items()
    for name, shape in zip(names, EIGHT_SLOT_SHAPES, strict=True)
] + [
    ("A30-24GB", name, float(name.split(".")[1].removesuffix("gb")), *shape)
    for name, shape in A30_SHAPES.items()
]
MIG_MODELS = {*EIGHT_SLOT_MIG, "A30-24GB"}


def _by_name(name: str) -> GpuModel:
    (model,) = [m for m in CATALOG.models if m.name == name]
    return model


def test_catalog_holds_exactly_the_listed_models() -> None:
    assert sorted(m.name for m in CATALOG.models) == sorted(ALL_NAMES)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_every_figure_has_a_source(name: str) -> None:
    model = _by_name(name)
    assert set(model.sources) == set(FIGURES)
    for figure in FIGURES:
        assert model.sources[figure].strip(), f"{name}.{figure} has an empty source"


@pytest.mark.parametrize("name", ALL_NAMES)
def test_figures_are_plausible(name: str) -> None:
    model = _by_name(name)
    assert model.memory_gib > 0
    assert model.bf16_dense_tflops > 0
    assert model.tdp_watts > 0
    assert isinstance(model.nvlink, bool)


@pytest.mark.parametrize("name", ["G1", "G2", "G3"])
def test_undisclosed_trace_models_say_so(name: str) -> None:
    model = _by_name(name)
    assert model.vendor is Vendor.UNDISCLOSED
    assert model.mig is None
    for figure in FIGURES:
        assert "undisclosed" in model.sources[figure].casefold()
        assert "assumed" in model.sources[figure].casefold()


@pytest.mark.parametrize(
    ("name", "per_card", "card_1"), [("MI250X", 2, [2, 3]), ("MI300X", 1, [1]), ("H100-SXM-80GB", 1, [1])]
)
def test_a_card_is_as_many_runtime_devices_as_its_runtime_numbers(
    name: str, per_card: int, card_1: list
) -> None:
    """ROCm numbers an MI250X card's two GCDs as two devices; the catalogue sizes and prices the card."""
    model = CATALOG.get(name)
    assert model.runtime_devices_per_card == per_card
    assert list(model.runtime_devices(1)) == card_1


@pytest.mark.parametrize(
    ("name", "vendor"),
    [("MI250X", Vendor.AMD), ("MI300X", Vendor.AMD), ("Ascend-910B", Vendor.HUAWEI), ("BR100", Vendor.BIREN)],
)
def test_non_nvidia_vendors(name: str, vendor: Vendor) -> None:
    model = _by_name(name)
    assert model.vendor is vendor
    assert not model.nvlink
    assert model.mig is None


@pytest.mark.parametrize("name", ALL_NAMES)
def test_only_the_listed_models_have_mig(name: str) -> None:
    assert (_by_name(name).mig is not None) == (name in MIG_MODELS)


@pytest.mark.parametrize(
    ("name", "slots", "slices"),
    [(name, 8, 7) for name in EIGHT_SLOT_MIG] + [("A30-24GB", 4, 4)],
)
def test_mig_geometry(name: str, slots: int, slices: int) -> None:
    mig = _by_name(name).mig
    assert mig is not None
    assert (mig.placement_slot_count, mig.compute_slice_count) == (slots, slices)
    expected = EIGHT_SLOT_MIG.get(name, tuple(A30_SHAPES))
    assert tuple(p.name for p in mig.profiles) == expected


@pytest.mark.parametrize(
    ("model", "profile", "memory_gib"),
    [row[:3] for row in MIG_ROWS],
    ids=[f"{row[0]}-{row[1]}" for row in MIG_ROWS],
)
def test_mig_profile_memory(model: str, profile: str, memory_gib: float) -> None:
    mig = _by_name(model).mig
    assert mig is not None
    assert mig.profile(profile).memory_gib == memory_gib


@pytest.mark.parametrize(
    ("model", "profile", "compute", "slots", "starts"),
    [(row[0], row[1], *row[3:]) for row in MIG_ROWS],
    ids=[f"{row[0]}-{row[1]}" for row in MIG_ROWS],
)
def test_mig_profile_placement(
    model: str, profile: str, compute: int, slots: int, starts: tuple[int, ...]
) -> None:
    mig = _by_name(model).mig
    assert mig is not None
    found = mig.profile(profile)
    assert found.compute_slices == compute
    assert found.placement_slots == slots
    assert found.valid_starts == starts
    for start in found.valid_starts:
        assert found.slots_at(start).stop <= mig.placement_slot_count


@pytest.mark.parametrize(
    ("model", "profile"),
    [("A100-40GB", "1g.10gb"), ("H100-SXM-80GB", "1g.20gb"), ("H200-141GB", "1g.35gb"), ("B200", "1g.45gb")],
)
def test_double_memory_1g_profile_matches_2g_memory_on_even_slots(model: str, profile: str) -> None:
    mig = _by_name(model).mig
    assert mig is not None
    one_g = mig.profile(profile)
    assert one_g.compute_slices == 1
    assert one_g.memory_gib > mig.profiles[0].memory_gib
    assert one_g.memory_gib == mig.profiles[2].memory_gib  # the same memory as the 2g profile
    assert one_g.valid_starts == (0, 2, 4, 6)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_get_by_exact_name(name: str) -> None:
    assert CATALOG.get(name).name == name


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [("h100-pcie", "H100-PCIe"), ("rtx-4090", "RTX-4090"), ("ASCEND-910B", "Ascend-910B"), ("t4", "T4")],
)
def test_get_is_case_insensitive(wanted: str, expected: str) -> None:
    assert CATALOG.get(wanted).name == expected
    assert wanted in CATALOG


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        ("H200", "H200-141GB"),
        ("L40S", "L40S"),
        ("A30", "A30-24GB"),
        ("rtx4090", "RTX-4090"),
        ("ascend910b", "Ascend-910B"),
    ],
)
def test_get_by_unique_family(family: str, expected: str) -> None:
    assert CATALOG.get(family).name == expected


@pytest.mark.parametrize("wanted", ["A100", "H100", "V100", "a100"])
def test_ambiguous_family_is_an_error(wanted: str) -> None:
    with pytest.raises(CatalogError, match="is ambiguous: say "):
        CATALOG.get(wanted)
    assert wanted not in CATALOG


@pytest.mark.parametrize("wanted", ["GB200", "A100-40", pytest.param("", id="empty"), "K80"])
def test_unknown_model_is_an_error(wanted: str) -> None:
    with pytest.raises(CatalogError) as raised:
        CATALOG.get(wanted)
    for name in ALL_NAMES:
        assert name in str(raised.value)
    assert wanted not in CATALOG


@pytest.mark.parametrize(
    ("model", "missing"),
    [("A100-40GB", "1g.20gb"), ("H200-141GB", "7g.140gb"), ("A30-24GB", "3g.18gb"), ("B200", "1g.23gb+me")],
)
def test_unknown_profile_error_lists_known_profiles(model: str, missing: str) -> None:
    mig = _by_name(model).mig
    assert mig is not None
    assert not mig.has_profile(missing)
    with pytest.raises(CatalogError) as raised:
        mig.profile(missing)
    message = str(raised.value)
    assert repr(missing) in message
    for profile in mig.profiles:
        assert profile.name in message
