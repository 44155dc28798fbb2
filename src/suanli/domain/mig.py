"""NVIDIA MIG placement: where an instance of a profile may start, and how to make room for one.

A GPU's MIG layout is a tuple of `MigInstance` (start slot, profile name, busy). An instance occupies
`profile.placement_slots` consecutive placement slots from its start, and may start only at one of the
profile's `valid_starts` (NVIDIA's placement table). Idle instances may be destroyed to make room
(a repartition); busy ones never are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from suanli.domain.catalog import MigGeometry
from suanli.domain.errors import MigPlacementError

MigInstance = tuple[int, str, bool]  # (start slot, profile name, busy)


def base_profile(name: str) -> str:
    """A MIG profile's name without its variant ("1g.10gb+me" -> "1g.10gb"): a media-extension variant
    takes its base profile's slots (NVIDIA's placement table), so it is placed and reused as its base."""
    return name.partition("+")[0].strip()


@dataclass(frozen=True, slots=True)
class MigOption:
    """Where to put one instance: reuse an idle one, or create it at `start` after destroying `destroyed`."""

    start: int
    profile: str
    reuse: bool
    destroyed: tuple[MigInstance, ...] = ()

    @property
    def repartitions(self) -> bool:
        return not self.reuse


def check_layout(geometry: MigGeometry, instances: Iterable[tuple[int, str]]) -> None:
    """Raise MigPlacementError when an instance starts at a slot NVIDIA forbids or overlaps another."""
    used: dict[int, str] = {}
    for start, name in instances:
        profile = geometry.profile(name)
        if start not in profile.valid_starts:
            starts = ", ".join(map(str, profile.valid_starts))
            raise MigPlacementError(f"{name} cannot start at slot {start}; valid starts are {starts}")
        for slot in profile.slots_at(start):
            if slot in used:
                raise MigPlacementError(f"{name} at slot {start} overlaps {used[slot]} at slot {slot}")
            used[slot] = name


def pack_layout(geometry: MigGeometry, profile_names: Iterable[str]) -> tuple[MigInstance, ...]:
    """Place the named profiles as idle instances, or raise MigPlacementError when no valid layout exists.

    A small backtracking search over valid starts: largest profiles first, each trying its lowest free
    valid start first, so the result is deterministic and matches the greedy layout whenever that works.
    Copies of one profile take increasing starts, so no arrangement is tried twice.
    """
    given = list(profile_names)
    first = {name: given.index(name) for name in given}
    names = sorted(given, key=lambda n: (-geometry.profile(n).placement_slots, first[n]))
    profiles = [geometry.profile(name) for name in names]
    if sum(p.placement_slots for p in profiles) > geometry.placement_slot_count:
        raise MigPlacementError(
            f"no room for {names}: they need more than {geometry.placement_slot_count} slots"
        )
    starts: list[int] = []
    dead_ends: set[tuple[int, int, frozenset[int]]] = set()

    def search(index: int, used: frozenset[int]) -> bool:
        if index == len(profiles):
            return True
        profile = profiles[index]
        lowest = starts[-1] + 1 if index and names[index - 1] == names[index] else 0
        if (index, lowest, used) in dead_ends:
            return False
        for start in profile.valid_starts:
            slots = profile.slots_at(start)
            if start < lowest or any(slot in used for slot in slots):
                continue
            starts.append(start)
            if search(index + 1, used.union(slots)):
                return True
            starts.pop()
        dead_ends.add((index, lowest, used))
        return False

    if not search(0, frozenset()):
        raise MigPlacementError(f"no room for {names}: no valid placement holds them all")
    return tuple(sorted((start, name, False) for start, name in zip(starts, names, strict=True)))


def free_slots(geometry: MigGeometry, layout: tuple[MigInstance, ...]) -> set[int]:
    """Placement slots no instance occupies."""
    taken = {slot for start, name, _ in layout for slot in geometry.profile(name).slots_at(start)}
    return set(range(geometry.placement_slot_count)) - taken


def busy_compute_slices(geometry: MigGeometry, layout: tuple[MigInstance, ...]) -> int:
    return sum(geometry.profile(name).compute_slices for _, name, busy in layout if busy)


def busy_memory_gib(geometry: MigGeometry, layout: tuple[MigInstance, ...]) -> float:
    return sum(geometry.profile(name).memory_gib for _, name, busy in layout if busy)


def best_option(
    geometry: MigGeometry, layout: tuple[MigInstance, ...], profile_name: str
) -> MigOption | None:
    """The best way to host one `profile_name` instance on this GPU, or None when it cannot fit.

    Prefer reusing an idle instance of the profile; else create one where it destroys the fewest idle
    compute slices and leaves the largest profile still placeable; ties go to the highest start slot.
    """
    if not geometry.has_profile(profile_name):
        return None
    for start, name, busy in layout:
        if name == profile_name and not busy:
            return MigOption(start, profile_name, reuse=True)
    profile = geometry.profile(profile_name)
    best: tuple[tuple[int, int, int], MigOption] | None = None
    for start in profile.valid_starts:
        slots = set(profile.slots_at(start))
        overlapping = tuple(
            inst for inst in layout if slots.intersection(geometry.profile(inst[1]).slots_at(inst[0]))
        )
        if any(busy for _, _, busy in overlapping):
            continue
        remaining = (*(inst for inst in layout if inst not in overlapping), (start, profile_name, True))
        rank = (
            sum(geometry.profile(name).compute_slices for _, name, _ in overlapping),
            -largest_placeable_compute(geometry, remaining),
            -start,
        )
        if best is None or rank < best[0]:
            best = (rank, MigOption(start, profile_name, reuse=False, destroyed=overlapping))
    return None if best is None else best[1]


def largest_placeable_compute(geometry: MigGeometry, layout: tuple[MigInstance, ...]) -> int:
    """Compute slices of the largest profile that still fits in the free slots of `layout`."""
    free = free_slots(geometry, layout)
    return max(
        (
            p.compute_slices
            for p in geometry.profiles
            if any(all(x in free for x in p.slots_at(s)) for s in p.valid_starts)
        ),
        default=0,
    )


def placeable_count(geometry: MigGeometry, layout: tuple[MigInstance, ...], profile_name: str) -> int:
    """How many instances of `profile_name` this GPU could run at once now: idle instances reused or
    destroyed to make room, busy ones kept. What a search for free MIG capacity counts, one profile at a
    time (a GPU that can host seven 1g or two 3g counts in both)."""
    if not geometry.has_profile(profile_name):
        return 0
    taken = {slot for start, name, busy in layout if busy for slot in geometry.profile(name).slots_at(start)}
    profile = geometry.profile(profile_name)
    count, next_free = 0, 0
    for start in sorted(profile.valid_starts):  # one size: the earliest start that fits is never worse
        slots = profile.slots_at(start)
        if start >= next_free and not taken.intersection(slots):
            count, next_free = count + 1, slots.stop
    return count


def apply_option(layout: tuple[MigInstance, ...], option: MigOption) -> tuple[MigInstance, ...]:
    """The layout after `option`, with the instance marked busy."""
    if option.reuse:
        kept = tuple(inst for inst in layout if inst != (option.start, option.profile, False))
    else:
        kept = tuple(inst for inst in layout if inst not in option.destroyed)
    return tuple(sorted((*kept, (option.start, option.profile, True))))


def undo_option(layout: tuple[MigInstance, ...], option: MigOption) -> tuple[MigInstance, ...]:
    """The layout before `option` was applied: its busy instance goes, what it reused or destroyed is back."""
    instance = (option.start, option.profile, True)
    if instance not in layout:
        raise MigPlacementError(f"no busy {option.profile} at slot {option.start} to undo")
    restored = (option.start, option.profile, False) if option.reuse else None
    kept = tuple(inst for inst in layout if inst != instance)
    return tuple(sorted((*kept, *option.destroyed, *((restored,) if restored else ()))))


def release(layout: tuple[MigInstance, ...], start: int, profile_name: str) -> tuple[MigInstance, ...]:
    """The layout after the busy instance at `start` is freed (it stays, idle, for the next tenant)."""
    if (start, profile_name, True) not in layout:
        raise MigPlacementError(f"no busy {profile_name} at slot {start} to release")
    return tuple(sorted((s, n, b and not (s == start and n == profile_name)) for s, n, b in layout))


_BEST: dict[tuple[int, tuple[MigInstance, ...], str], MigOption | None] = {}
_GEOMETRIES: dict[int, MigGeometry] = {}  # keeps keyed geometries alive, so an id is never reused
_CACHE_LIMIT = 200_000


def cached_best_option(
    geometry: MigGeometry, layout: tuple[MigInstance, ...], profile: str
) -> MigOption | None:
    """`best_option`, memoised: the scheduler asks the same question for every node in the same state."""
    key = (id(geometry), layout, profile)
    if key in _BEST:
        return _BEST[key]
    if len(_BEST) > _CACHE_LIMIT:
        _BEST.clear()
    _GEOMETRIES[id(geometry)] = geometry
    found = _BEST[key] = best_option(geometry, layout, profile)
    return found


_HOSTABLE: dict[tuple[int, tuple[MigInstance, ...]], frozenset[str]] = {}


def hostable_profiles(geometry: MigGeometry, layout: tuple[MigInstance, ...]) -> frozenset[str]:
    """The profiles one more instance of which fits this layout (reusing or repartitioning idle slices)."""
    key = (id(geometry), layout)
    found = _HOSTABLE.get(key)
    if found is None:
        if len(_HOSTABLE) > _CACHE_LIMIT:
            _HOSTABLE.clear()
        _GEOMETRIES[id(geometry)] = geometry
        found = _HOSTABLE[key] = frozenset(
            p.name for p in geometry.profiles if cached_best_option(geometry, layout, p.name) is not None
        )
    return found
