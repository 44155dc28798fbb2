"""Fair share between tenants: each tenant's GPU-seconds with exponential decay, the queue's order key."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0


MIN_WEIGHT = 0.001  # a fair-share weight's range is 1/1000 to 1000 times the default's (1)
MAX_WEIGHT = 1000.0


@dataclass(frozen=True, slots=True)
class FairShare:
    """Each tenant's GPU-seconds with exponential decay (half-life `half_life_s`), as of `at_s`.

    Immutable: `advance` returns the value one interval later given the GPUs each tenant held through it.
    Only GPUs are counted, so a tenant's dominant share is its GPU share.
    """

    usage_gpu_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    at_s: float = 0.0
    half_life_s: float = DEFAULT_HALF_LIFE_S

    @property
    def horizon_s(self) -> float:
        """The decay's mean life: a constant holding of g GPUs converges to g x horizon GPU-seconds."""
        return self.half_life_s / math.log(2)

    def advance(self, now: float, held_gpus: Mapping[str, float]) -> FairShare:
        if now <= self.at_s:
            return self
        decay = 0.5 ** ((now - self.at_s) / self.half_life_s)
        gain = (1.0 - decay) * self.horizon_s
        usage = {t: u * decay for t, u in self.usage_gpu_s.items()}
        for tenant, gpus in held_gpus.items():
            usage[tenant] = usage.get(tenant, 0.0) + gpus * gain
        return FairShare(MappingProxyType(usage), now, self.half_life_s)

    def share(self, tenant: str, capacity_gpus: float) -> float:
        """The tenant's decayed dominant (GPU) share of the fleet, 0..1."""
        return self.usage_gpu_s.get(tenant, 0.0) / (capacity_gpus * self.horizon_s)
