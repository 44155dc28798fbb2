"""Fair share on the leader: decayed with the GPUs each tenant holds, saved every `FAIR_SHARE_SAVE_S` and read
back by the next leader."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING

from suanli.app.ports import UnitOfWork
from suanli.domain.fair_share import FairShare
from suanli.domain.running import Running

if TYPE_CHECKING:
    from suanli.app.scheduling import Scheduler


FAIR_SHARE_SAVE_S = 60.0  # how often the leader saves fair-share usage (a new leader loses at most this much)


class FairShareKeeping:
    """Fair share as of a cycle, a part of the `Scheduler`."""

    def _advance_fair_share(
        self: Scheduler, uow: UnitOfWork, now_s: float, held: Mapping[str, float]
    ) -> None:
        """Fair share as of `now_s` (`_fair_share_at`), saved every `FAIR_SHARE_SAVE_S` for the next
        leader."""
        self.fair, self.fair_saved_s = self._fair_share_at(uow, now_s, held)
        if self.fair_saved_s is None or now_s - self.fair_saved_s >= FAIR_SHARE_SAVE_S:
            usage = {t: u for t, u in self.fair.usage_gpu_s.items() if u >= 1.0}  # below 1 GPU-s: forgotten
            uow.terms.save_fair_share(usage, datetime.fromtimestamp(now_s, UTC))
            uow.commit()
            self.fair_saved_s = now_s

    def _fair_share_at(
        self: Scheduler, uow: UnitOfWork, now_s: float, held: Mapping[str, float]
    ) -> tuple[FairShare, float | None]:
        """Fair share as of `now_s`: read back when another leader saved since (or on the first cycle),
        decayed with the GPUs each tenant holds; and when the store's was saved, as last seen. Nothing is kept
        or written (the dry run asks too)."""
        fair, seen_s = self.fair, self.fair_saved_s
        saved_at = uow.terms.fair_share_saved_at()
        saved_s = None if saved_at is None else saved_at.timestamp()
        if saved_s is not None and (seen_s is None or abs(saved_s - seen_s) > 1e-3):
            fair = FairShare(MappingProxyType(uow.terms.fair_share()), saved_s, fair.half_life_s)
            seen_s = saved_s
        if not fair.at_s:
            fair = FairShare(at_s=now_s, half_life_s=fair.half_life_s)
        return fair.advance(now_s, held), seen_s


def gpus_by_tenant(running: Sequence[Running]) -> dict[str, float]:
    """The GPUs each tenant holds now (what its fair-share usage grows by)."""
    held: dict[str, float] = {}
    for r in running:
        held[r.request.tenant] = held.get(r.request.tenant, 0.0) + r.gpus
    return held
