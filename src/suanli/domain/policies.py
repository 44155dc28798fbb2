"""Placement policies: how to rank the ways a request can fit a node. Lower score is better.

`random`, `best-fit` and `fgd` reproduce the baselines of the FGD paper's simulator, integer scores and
random tie-breaks included, so that their numbers compare with the published ones. `suanli` is our
default (see `SuanliPolicy`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from suanli.domain.capacity import FULL_MILLI, NodeClass, NodeKey, Option
from suanli.domain.fragmentation import FragmentationModel, TypicalRequest, typical_mix
from suanli.domain.request import Request
from suanli.domain.snapshot import Snapshot

Score = tuple[float, ...]
MAX_NODE_SCORE = 100  # Kubernetes' framework.MaxNodeScore, which the published baselines quantise to
MAX_SPEC_CPU_MILLI = 128_000  # the FGD simulator's normalisation constants for best-fit
MAX_SPEC_GPU_MILLI = 8_000


@dataclass
class Policy:
    """Base policy. `random_ties`: pick uniformly among the best nodes; `random_gpu`: any fitting GPU."""

    name: str = "base"
    seed: int = 0
    random_ties: bool = False
    random_gpu: bool = False
    memo: dict = field(default_factory=dict, repr=False, compare=False)  # scheduler's per-policy cache
    bound_to: object = field(default=None, repr=False, compare=False)

    def bind(self, snapshot: object) -> None:
        """Caches key on the snapshot's class and state ids: drop them when the snapshot changes."""
        if self.bound_to is not snapshot:
            self.bound_to = snapshot
            self.memo.clear()
            self.reset(snapshot)

    def reset(self, snapshot: object = None) -> None:
        """Forget derived caches (fragmentation values) keyed on another snapshot's ids."""

    def score(self, class_id: int, cls: NodeClass, before: NodeKey, option: Option) -> Score:
        raise NotImplementedError


@dataclass
class RandomPolicy(Policy):
    """A uniformly random feasible node, and on it a random fitting GPU."""

    name: str = "random"
    random_ties: bool = True
    random_gpu: bool = True

    def score(self, class_id: int, cls: NodeClass, before: NodeKey, option: Option) -> Score:
        return (0.0,)


@dataclass
class BestFitPolicy(Policy):
    """The node left with the least free CPU and GPU (half weight each); on it, the tightest GPU."""

    name: str = "best-fit"

    def score(self, class_id: int, cls: NodeClass, before: NodeKey, option: Option) -> Score:
        cpu_after, _, gpus_after = option.after
        left = 0.5 * cpu_after / MAX_SPEC_CPU_MILLI + 0.5 * sum(e[0] for e in gpus_after) / MAX_SPEC_GPU_MILLI
        return (-math.floor((1.0 - left) * MAX_NODE_SCORE), sum(c.before[0] for c in option.choices))


@dataclass
class FgdPolicy(Policy):
    """Fragmentation Gradient Descent as published: sigmoid of the fragmentation drop, as an integer score."""

    name: str = "fgd"
    mix: tuple[TypicalRequest, ...] = ()
    model: FragmentationModel = field(init=False)

    def __post_init__(self) -> None:
        self.model = FragmentationModel(self.mix)

    def reset(self, snapshot: object = None) -> None:
        self.model = FragmentationModel(self.mix)

    def score(self, class_id: int, cls: NodeClass, before: NodeKey, option: Option) -> Score:
        drop = self.model.of(class_id, cls, before) - self.model.of(class_id, cls, option.after)
        return (-math.floor(_sigmoid(drop / FULL_MILLI) * MAX_NODE_SCORE),)


def _sigmoid(x: float) -> float:
    if x < -700:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


@dataclass
class SuanliPolicy(Policy):
    """FGD's gradient first; among near-equal options, the one that strands the least GPU over time.

    The first key is the growth of FGD's fragmentation (rounded to `resolution_milli`, so noise does not
    decide). The second is the growth of the *lifetime* fragmentation: idle GPU that the request mix
    could never use on the node even if packed full, which sees GPUs stranded by CPU or memory early.
    Each request shape's weight there is its share of requests times its scarcity (fleet GPUs over GPUs
    on nodes that could ever host it), so the few nodes that alone can serve a large shape are kept
    for it. Remaining ties go to the lowest node index, which consolidates load onto fewer nodes.
    """

    name: str = "suanli"
    mix: tuple[TypicalRequest, ...] = ()
    demand_mix: tuple[TypicalRequest, ...] = ()
    resolution_milli: float = 40.0
    second_resolution_milli: float = 100.0
    next_fit: FragmentationModel = field(init=False)
    lifetime: FragmentationModel = field(init=False)

    def __post_init__(self) -> None:
        self.reset()

    def reset(self, snapshot: object = None) -> None:
        self.next_fit = FragmentationModel(self.mix)
        lifetime_mix = self.demand_mix or self.mix
        if isinstance(snapshot, Snapshot):
            lifetime_mix = scarcity_weighted(lifetime_mix, snapshot)
        self.lifetime = FragmentationModel(lifetime_mix, repeated=True)

    def score(self, class_id: int, cls: NodeClass, before: NodeKey, option: Option) -> Score:
        after = option.after
        growth = self.next_fit.of(class_id, cls, after) - self.next_fit.of(class_id, cls, before)
        stranded = self.lifetime.of(class_id, cls, after) - self.lifetime.of(class_id, cls, before)
        return (
            round(growth / self.resolution_milli),
            round(stranded / self.second_resolution_milli),
            sum(c.before[0] for c in option.choices),
        )


def scarcity_weighted(mix: tuple[TypicalRequest, ...], snapshot: Snapshot) -> tuple[TypicalRequest, ...]:
    """`mix` with each probability scaled by fleet GPUs / GPUs on nodes whose empty state could host it."""
    gpus_by_class = [0] * len(snapshot.classes)
    for state in snapshot.nodes:
        gpus_by_class[state.class_id] += state.node.gpu_count
    fleet_gpus = max(sum(gpus_by_class), 1)
    weighted = []
    for typical in mix:
        supply = sum(
            gpus
            for cls, gpus in zip(snapshot.classes, gpus_by_class, strict=True)
            if cls.selector_allows(typical.selector, typical.shape)
            and typical.cpu_milli <= cls.cpu_milli
            and typical.memory_mib <= cls.memory_mib
        )
        if supply:
            weighted.append(replace(typical, probability=typical.probability * fleet_gpus / supply))
    return tuple(weighted)


POLICY_NAMES = ("random", "best-fit", "fgd", "suanli")


def build_policy(name: str, *, seed: int, history: Sequence[Request]) -> Policy:
    """The named policy; fragmentation-aware ones learn their typical mix from `history`."""
    if name == "random":
        return RandomPolicy(seed=seed)
    if name == "best-fit":
        return BestFitPolicy(seed=seed)
    if name == "fgd":
        return FgdPolicy(seed=seed, mix=typical_mix(history))
    if name == "suanli":
        return SuanliPolicy(seed=seed, mix=typical_mix(history), demand_mix=typical_mix(history, 1.0))
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
