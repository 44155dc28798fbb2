"""NVIDIA MIG placement rules on every MIG model we rent: valid starts, overlaps, packing and carving."""

from __future__ import annotations

from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.domain.catalog import MigGeometry
from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import MigPlacementError
from suanli.domain.mig import (
    MigInstance,
    MigOption,
    apply_option,
    best_option,
    check_layout,
    pack_layout,
    placeable_count,
    release,
)

# NVIDIA's placement table, written out independently of the catalogue: size kind -> (slots, valid starts).
EIGHT_SLOT_RULES = {
    "1g": (1, (0, 1, 2, 3, 4, 5, 6)),
    "1g-double": (2, (0, 2, 4, 6)),
    "2g": (2, (0, 2, 4)),
    "3g": (4, (0, 4)),
    "4g": (4, (0,)),
    "7g": (8, (0,)),
}
FOUR_SLOT_RULES = {"1g": (1, (0, 1, 2, 3)), "2g": (2, (0, 2)), "4g": (4, (0,))}

PROFILES = {
    "A100-80GB": dict(
        zip(EIGHT_SLOT_RULES, ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"), strict=True)
    ),
    "A100-40GB": dict(
        zip(EIGHT_SLOT_RULES, ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"), strict=True)
    ),
    "H100-SXM-80GB": dict(
        zip(EIGHT_SLOT_RULES, ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"), strict=True)
    ),
    "H200-141GB": dict(
        zip(
            EIGHT_SLOT_RULES, ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"), strict=True
        )
    ),
    "A30-24GB": dict(zip(FOUR_SLOT_RULES, ("1g.6gb", "2g.12gb", "4g.24gb"), strict=True)),
}
EIGHT_SLOT_MODELS = ("A100-80GB", "A100-40GB", "H100-SXM-80GB", "H200-141GB")
MODELS = (*EIGHT_SLOT_MODELS, "A30-24GB")


def geometry_of(model: str) -> MigGeometry:
    geometry = CATALOG.get(model).mig
    assert geometry is not None
    return geometry


def rules_of(model: str) -> dict[str, tuple[int, tuple[int, ...]]]:
    return FOUR_SLOT_RULES if model == "A30-24GB" else EIGHT_SLOT_RULES


def name(model: str, kind: str) -> str:
    return PROFILES[model][kind]


def layout(model: str, *placed: tuple[int, str] | tuple[int, str, bool]) -> tuple[MigInstance, ...]:
    """Instances by size kind: (start, kind) is idle, (start, kind, True) busy."""
    return tuple(sorted((p[0], name(model, p[1]), bool(p[2]) if len(p) > 2 else False) for p in placed))


# --- check_layout: valid starts --------------------------------------------------------------------------


def _start_cases():
    for model in MODELS:
        slot_count = geometry_of(model).placement_slot_count
        for kind, (_, starts) in rules_of(model).items():
            for start in range(slot_count + 1):
                ok = start in starts
                yield pytest.param(
                    model, kind, start, ok, id=f"{model}-{name(model, kind)}@{start}-{'ok' if ok else 'bad'}"
                )


@pytest.mark.parametrize(("model", "kind", "start", "ok"), list(_start_cases()))
def test_a_profile_may_start_only_at_the_slots_nvidia_lists(
    model: str, kind: str, start: int, ok: bool
) -> None:
    geometry = geometry_of(model)
    if ok:
        check_layout(geometry, [(start, name(model, kind))])
    else:
        with pytest.raises(MigPlacementError, match="cannot start at slot"):
            check_layout(geometry, [(start, name(model, kind))])


@pytest.mark.parametrize("model", MODELS)
def test_the_catalogue_sizes_match_nvidias_table(model: str) -> None:
    geometry = geometry_of(model)
    assert geometry.placement_slot_count == (4 if model == "A30-24GB" else 8)
    for kind, (slots, starts) in rules_of(model).items():
        profile = geometry.profile(name(model, kind))
        assert (profile.placement_slots, profile.valid_starts) == (slots, starts)


# --- check_layout: whole layouts ------------------------------------------------------------------------

VALID_LAYOUTS = [
    *(
        pytest.param(model, placed, id=f"{model}-{label}")
        for model in EIGHT_SLOT_MODELS
        for label, placed in (
            ("7x1g", tuple((s, "1g") for s in range(7))),
            ("3g@0+3g@4", ((0, "3g"), (4, "3g"))),
            ("4g@0+3g@4", ((0, "4g"), (4, "3g"))),
            ("7g-alone", ((0, "7g"),)),
            ("2g@0+1g@2+1g@3+3g@4", ((0, "2g"), (2, "1g"), (3, "1g"), (4, "3g"))),
            ("3x2g+1g@6", ((0, "2g"), (2, "2g"), (4, "2g"), (6, "1g"))),
            ("4x1g-double", ((0, "1g-double"), (2, "1g-double"), (4, "1g-double"), (6, "1g-double"))),
            ("4g@0+2g@4+1g-double@6", ((0, "4g"), (4, "2g"), (6, "1g-double"))),
        )
    ),
    pytest.param("A30-24GB", tuple((s, "1g") for s in range(4)), id="A30-24GB-4x1g"),
    pytest.param("A30-24GB", ((0, "2g"), (2, "2g")), id="A30-24GB-2g@0+2g@2"),
    pytest.param("A30-24GB", ((0, "2g"), (2, "1g"), (3, "1g")), id="A30-24GB-2g+1g+1g"),
    pytest.param("A30-24GB", ((0, "4g"),), id="A30-24GB-4g-alone"),
]


@pytest.mark.parametrize(("model", "placed"), VALID_LAYOUTS)
def test_layouts_nvidia_allows_are_valid_and_pack(model: str, placed: tuple[tuple[int, str], ...]) -> None:
    geometry = geometry_of(model)
    instances = [(start, name(model, kind)) for start, kind in placed]
    check_layout(geometry, instances)
    for order in (instances, instances[::-1]):
        packed = pack_layout(geometry, [n for _, n in order])
        check_layout(geometry, [(s, n) for s, n, _ in packed])
        assert sorted(n for _, n, _ in packed) == sorted(n for _, n in instances)
        assert not any(busy for _, _, busy in packed)


OVERLAPS = [
    *(
        pytest.param(model, placed, id=f"{model}-{label}")
        for model in EIGHT_SLOT_MODELS
        for label, placed in (
            ("3g@0+2g@2", ((0, "3g"), (2, "2g"))),
            ("4g@0+1g@3", ((0, "4g"), (3, "1g"))),
            ("2g@4+1g@5", ((4, "2g"), (5, "1g"))),
            ("7g@0+1g@6", ((0, "7g"), (6, "1g"))),
            ("1g@2-twice", ((2, "1g"), (2, "1g"))),
            ("1g-double@6+1g@6", ((6, "1g-double"), (6, "1g"))),
            ("4g@0+3g@0", ((0, "4g"), (0, "3g"))),
        )
    ),
    pytest.param("A30-24GB", ((0, "2g"), (1, "1g")), id="A30-24GB-2g@0+1g@1"),
    pytest.param("A30-24GB", ((0, "4g"), (3, "1g")), id="A30-24GB-4g@0+1g@3"),
]


@pytest.mark.parametrize(("model", "placed"), OVERLAPS)
def test_overlapping_instances_are_rejected(model: str, placed: tuple[tuple[int, str], ...]) -> None:
    with pytest.raises(MigPlacementError, match="overlaps"):
        check_layout(geometry_of(model), [(start, name(model, kind)) for start, kind in placed])


@pytest.mark.parametrize("model", EIGHT_SLOT_MODELS)
def test_an_eighth_1g_instance_is_impossible(model: str) -> None:
    geometry = geometry_of(model)
    one = name(model, "1g")
    with pytest.raises(MigPlacementError, match="cannot start at slot 7"):
        check_layout(geometry, [*((s, one) for s in range(7)), (7, one)])
    with pytest.raises(MigPlacementError, match="no room"):
        pack_layout(geometry, [one] * 8)
    assert best_option(geometry, layout(model, *((s, "1g", True) for s in range(7))), one) is None


# --- pack_layout -----------------------------------------------------------------------------------------

PACKED = [
    pytest.param(
        ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"),
        ((0, "2g.20gb"), (2, "1g.10gb"), (3, "1g.10gb"), (4, "3g.40gb")),
        id="3g-2g-1g-1g-needs-3g-at-4",
    ),
    pytest.param(
        ("2g.20gb", "3g.40gb", "2g.20gb"),
        ((0, "2g.20gb"), (2, "2g.20gb"), (4, "3g.40gb")),
        id="3g-2g-2g-needs-3g-at-4",
    ),
    pytest.param(("4g.40gb", "3g.40gb"), ((0, "4g.40gb"), (4, "3g.40gb")), id="4g-3g"),
    pytest.param(("3g.40gb", "3g.40gb"), ((0, "3g.40gb"), (4, "3g.40gb")), id="3g-3g"),
    pytest.param(("1g.10gb", "2g.20gb"), ((0, "2g.20gb"), (2, "1g.10gb")), id="largest-first-lowest-start"),
    pytest.param((), (), id="empty"),
]


@pytest.mark.parametrize(("names", "expected"), PACKED)
def test_pack_layout_is_deterministic_largest_first_at_the_lowest_starts(
    names: tuple[str, ...], expected: tuple[tuple[int, str], ...]
) -> None:
    packed = pack_layout(geometry_of("A100-80GB"), names)
    assert packed == tuple((start, n, False) for start, n in expected)


@pytest.mark.parametrize(
    "names",
    [
        pytest.param(("4g.40gb", "4g.40gb"), id="two-4g"),
        pytest.param(("7g.80gb", "1g.10gb"), id="7g-and-more"),
        pytest.param(("3g.40gb", "3g.40gb", "1g.10gb"), id="two-3g-and-a-1g"),
        pytest.param(("4g.40gb", "3g.40gb", "1g.10gb"), id="4g-3g-1g"),
        pytest.param(("1g.20gb",) * 4 + ("1g.10gb",), id="four-1g-double-and-a-1g"),
        pytest.param(("1g.10gb",) * 20, id="twenty-1g"),
    ],
)
def test_pack_layout_raises_only_when_nothing_fits(names: tuple[str, ...]) -> None:
    with pytest.raises(MigPlacementError, match="no room"):
        pack_layout(geometry_of("A100-80GB"), names)


def _exists(geometry: MigGeometry, names: list[str]) -> bool:
    """Brute force: some choice of valid starts places every profile without overlap."""
    profiles = [geometry.profile(n) for n in names]
    for starts in product(*(p.valid_starts for p in profiles)):
        slots = [slot for p, s in zip(profiles, starts, strict=True) for slot in p.slots_at(s)]
        if len(slots) == len(set(slots)):
            return True
    return False


@settings(max_examples=200, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    picks=st.lists(st.integers(0, 5), min_size=0, max_size=5),
)
def test_pack_layout_succeeds_exactly_when_a_valid_layout_exists(model: str, picks: list[int]) -> None:
    geometry = geometry_of(model)
    kinds = list(rules_of(model))
    names = [name(model, kinds[i % len(kinds)]) for i in picks]
    if _exists(geometry, names):
        packed = pack_layout(geometry, names)
        check_layout(geometry, [(s, n) for s, n, _ in packed])
        assert sorted(n for _, n, _ in packed) == sorted(names)
    else:
        with pytest.raises(MigPlacementError):
            pack_layout(geometry, names)


# --- best_option ------------------------------------------------------------------------------------------

A100 = "A100-80GB"
A30 = "A30-24GB"

BEST = [
    pytest.param(
        A100,
        layout(A100, (0, "3g"), (4, "3g", True)),
        "3g",
        MigOption(0, "3g.40gb", reuse=True),
        id="reuses-idle-3g",
    ),
    pytest.param(
        A100,
        layout(A100, (6, "1g")),
        "1g",
        MigOption(6, "1g.10gb", reuse=True),
        id="reuses-idle-1g-over-free-slots",
    ),
    pytest.param(A100, layout(A100), "7g", MigOption(0, "7g.80gb", reuse=False), id="empty-gpu-creates-7g"),
    pytest.param(
        A100,
        layout(A100, (0, "4g", True)),
        "3g",
        MigOption(4, "3g.40gb", reuse=False),
        id="creates-at-free-start",
    ),
    pytest.param(
        A100,
        layout(A100, (0, "3g", True), (5, "1g", True)),
        "1g",
        MigOption(6, "1g.10gb", reuse=False),
        id="creates-1g-at-highest-tied-start",
    ),
    pytest.param(
        A100,
        layout(A100, (0, "7g")),
        "3g",
        MigOption(4, "3g.40gb", reuse=False, destroyed=((0, "7g.80gb", False),)),
        id="repartitions-idle-7g",
    ),
    pytest.param(
        A100,
        layout(A100, (0, "4g"), (4, "1g")),
        "3g",
        MigOption(4, "3g.40gb", reuse=False, destroyed=((4, "1g.10gb", False),)),
        id="destroys-fewest-idle-slices",
    ),
    pytest.param(
        A100,
        layout(A100, (0, "3g", True), (4, "1g"), (5, "1g"), (6, "1g")),
        "3g",
        MigOption(
            4,
            "3g.40gb",
            reuse=False,
            destroyed=((4, "1g.10gb", False), (5, "1g.10gb", False), (6, "1g.10gb", False)),
        ),
        id="destroys-idle-around-busy",
    ),
    pytest.param(A100, layout(A100, (0, "4g", True), (4, "3g", True)), "1g", None, id="full-of-busy"),
    pytest.param(
        A100, layout(A100, (0, "3g", True), (5, "1g", True)), "3g", None, id="busy-1g-blocks-3g-at-4"
    ),
    pytest.param(
        A100, layout(A100, (0, "3g", True), (5, "1g", True)), "2g", None, id="busy-blocks-every-2g-start"
    ),
    pytest.param(
        A100, layout(A100, (4, "1g", True)), "4g", MigOption(0, "4g.40gb", reuse=False), id="4g-beside-busy"
    ),
    pytest.param(A100, layout(A100, (2, "1g", True)), "4g", None, id="busy-1g-in-4g-only-start"),
    pytest.param(A30, layout(A30), "4g", MigOption(0, "4g.24gb", reuse=False), id="a30-empty-4g"),
    pytest.param(
        A30, layout(A30, (0, "2g", True)), "2g", MigOption(2, "2g.12gb", reuse=False), id="a30-2g-at-2"
    ),
    pytest.param(
        A30, layout(A30, (1, "1g", True)), "2g", MigOption(2, "2g.12gb", reuse=False), id="a30-2g-skip-0"
    ),
]


@pytest.mark.parametrize(("model", "before", "kind", "expected"), BEST)
def test_best_option(
    model: str, before: tuple[MigInstance, ...], kind: str, expected: MigOption | None
) -> None:
    geometry = geometry_of(model)
    option = best_option(geometry, before, name(model, kind))
    assert option == expected
    if option is None:
        return
    assert option.repartitions is not option.reuse
    assert not any(busy for _, _, busy in option.destroyed)
    after = apply_option(before, option)
    check_layout(geometry, [(s, n) for s, n, _ in after])
    assert {i for i in before if i[2]} <= set(after)


def test_a_profile_the_model_lacks_has_no_option() -> None:
    assert best_option(geometry_of(A100), (), "3g.71gb") is None


def test_release_of_an_instance_that_is_not_busy_raises() -> None:
    with pytest.raises(MigPlacementError, match="no busy"):
        release(layout(A100, (0, "3g")), 0, "3g.40gb")


# --- random layouts: apply_option and release ------------------------------------------------------------


@st.composite
def random_layouts(draw: st.DrawFn) -> tuple[str, tuple[MigInstance, ...]]:
    """A model and a valid layout built by adding random instances where they fit, some busy."""
    model = draw(st.sampled_from(MODELS))
    geometry = geometry_of(model)
    placed: list[MigInstance] = []
    for _ in range(draw(st.integers(0, 8))):
        profile = draw(st.sampled_from(geometry.profiles))
        start = draw(st.sampled_from(profile.valid_starts))
        busy = draw(st.booleans())
        try:
            check_layout(geometry, [*((s, n) for s, n, _ in placed), (start, profile.name)])
        except MigPlacementError:
            continue
        placed.append((start, profile.name, busy))
    return model, tuple(sorted(placed))


@settings(max_examples=200, deadline=None)
@given(case=random_layouts(), pick=st.integers(0, 5))
def test_apply_option_then_release_round_trips(case: tuple[str, tuple[MigInstance, ...]], pick: int) -> None:
    model, before = case
    geometry = geometry_of(model)
    profile = geometry.profiles[pick % len(geometry.profiles)].name
    option = best_option(geometry, before, profile)
    busy_before = {i for i in before if i[2]}
    if option is None:
        # Nothing fits: every valid start of the profile overlaps a busy instance.
        slots = {slot for s, n, _ in busy_before for slot in geometry.profile(n).slots_at(s)}
        p = geometry.profile(profile)
        assert all(slots.intersection(p.slots_at(s)) for s in p.valid_starts)
        return
    if option.reuse:
        assert (option.start, profile, False) in before
    after = apply_option(before, option)
    check_layout(geometry, [(s, n) for s, n, _ in after])
    assert busy_before <= set(after), "a busy instance was touched"
    assert set(option.destroyed) <= set(before) - busy_before
    assert {i for i in after if i[2]} == busy_before | {(option.start, profile, True)}

    released = release(after, option.start, profile)
    if option.reuse:
        assert released == before
    else:
        kept = set(before) - set(option.destroyed)
        assert set(released) == kept | {(option.start, profile, False)}
    again = best_option(geometry, released, profile)
    assert again is not None and again.reuse, "the freed instance stays for the next tenant"


# --- placeable_count: free MIG capacity per profile -------------------------------------------------------

COUNTS = [
    pytest.param(A100, layout(A100), "1g", 7, id="empty-seven-1g"),
    pytest.param(A100, layout(A100), "3g", 2, id="empty-two-3g"),
    pytest.param(A100, layout(A100), "7g", 1, id="empty-one-7g"),
    pytest.param(A100, layout(A100, (0, "4g"), (4, "2g"), (6, "1g")), "1g", 7, id="idle-instances-give-way"),
    pytest.param(A100, layout(A100, (0, "3g", True)), "1g", 3, id="busy-3g-leaves-slots-4-to-6"),
    pytest.param(A100, layout(A100, (0, "3g", True)), "2g", 1, id="busy-3g-leaves-one-2g"),
    pytest.param(A100, layout(A100, (5, "1g", True)), "3g", 1, id="busy-1g-at-5-blocks-3g-at-4"),
    pytest.param(A100, layout(A100, (2, "1g", True)), "4g", 0, id="busy-1g-in-4g-only-start"),
    pytest.param(A100, layout(A100, (1, "1g", True), (3, "1g", True)), "2g", 1, id="2g-only-at-4"),
    pytest.param(A30, layout(A30, (1, "1g", True)), "2g", 1, id="a30-2g-at-2"),
]


@pytest.mark.parametrize(("model", "before", "kind", "expected"), COUNTS)
def test_placeable_count(model: str, before: tuple[MigInstance, ...], kind: str, expected: int) -> None:
    assert placeable_count(geometry_of(model), before, name(model, kind)) == expected


def test_a_profile_the_model_lacks_counts_none() -> None:
    assert placeable_count(geometry_of(A100), (), "3g.71gb") == 0


@settings(max_examples=200, deadline=None)
@given(case=random_layouts(), pick=st.integers(0, 5))
def test_placeable_count_is_how_many_best_option_places_in_turn(
    case: tuple[str, tuple[MigInstance, ...]], pick: int
) -> None:
    """The count is the most instances of the profile that fit together beside the busy ones (every subset
    of its valid starts tried), on random layouts of every MIG model."""
    model, before = case
    geometry = geometry_of(model)
    profile = geometry.profiles[pick % len(geometry.profiles)].name
    expected = placeable_count(geometry, before, profile)
    brute = max(  # the most disjoint valid starts clear of busy instances, by trying every subset
        (
            len(subset)
            for subset in _subsets(geometry.profile(profile).valid_starts)
            if _disjoint_and_clear(geometry, before, profile, subset)
        ),
        default=0,
    )
    assert expected == brute


def _subsets(starts: tuple[int, ...]) -> list[tuple[int, ...]]:
    return [
        tuple(s for s, keep in zip(starts, mask, strict=True) if keep)
        for mask in product((0, 1), repeat=len(starts))
    ]


def _disjoint_and_clear(
    geometry: MigGeometry, before: tuple[MigInstance, ...], profile: str, starts: tuple[int, ...]
) -> bool:
    busy = [(s, n) for s, n, b in before if b]
    try:
        check_layout(geometry, [*busy, *((s, profile) for s in starts)])
    except MigPlacementError:
        return False
    return True
