"""What holds rentals back in a cycle besides capacity (`Gates`): tenants' limits, open contracts, maintenance
ahead, spot floors; and whether a preemptor's contract covers its victim's pool."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from suanli.app.limits import cycle_limits
from suanli.app.maintenance import upcoming
from suanli.app.ports import UnitOfWork
from suanli.app.records import Rental, domain_contract
from suanli.domain.queueing import Gates
from suanli.domain.request import Tier
from suanli.domain.running import Running

if TYPE_CHECKING:
    from suanli.app.scheduling import Scheduler


class Gating:
    """The cycle's gates, a part of the `Scheduler`."""

    def _reserved_for(self: Scheduler, uow: UnitOfWork, now: datetime) -> Callable[[Rental, Rental], bool]:
        """Whether an open contract of a preemptor's tenant covers its victim's pool (model, region) now."""
        now_s = now.timestamp()
        open_now = [domain_contract(c) for c in uow.contracts.list(None)]
        held = {(c.tenant, c.model, c.region) for c in open_now if c.open_at(now_s)}
        where = self.live.allocations_by_rental()

        def reserved_for(preemptor: Rental, victim: Rental) -> bool:
            pools = set()
            for allocation in where.get(victim.id, ()):
                node, model = self.live.node(allocation.node)
                pools.add((preemptor.tenant_id, model.name, node.region))
            return bool(pools) and pools <= held

        return reserved_for

    def _gates(
        self: Scheduler,
        uow: UnitOfWork,
        pending: Sequence[Rental],
        live: Mapping[str, tuple[Running, int]],
        now_s: float,
    ) -> Gates | None:
        """What holds rentals back besides capacity: tenants' limits (with what `pending` and `live` spend),
        open contracts, maintenance ahead; None when nothing does."""
        stored = uow.contracts.list(None)
        tenants = uow.terms.limits()
        limits = None
        if tenants:
            limits = cycle_limits(uow, self.catalog, tenants, pending, live, now_s, self.covered, stored)
        contracts = [domain_contract(c) for c in stored if c.ends_at.timestamp() > now_s]
        ahead = upcoming(self.windows, datetime.fromtimestamp(now_s, UTC))
        floor_of = self._pool_floor(uow, pending, now_s)
        if not contracts and limits is None and not ahead and floor_of is None:
            return None
        return Gates(limits, contracts, spot_floor=floor_of, evict_below_floor=False, maintenance=ahead)

    def _pool_floor(
        self: Scheduler, uow: UnitOfWork, pending: Sequence[Rental], now_s: float
    ) -> Callable[[str, str], int | None] | None:
        """The spot floor per GPU-hour of each (model, region) pool, while spot rentals wait: a bid is placed
        only in pools whose floor it meets, and waits (`bid_below_floor`) when it meets none. A running rental
        whose bid falls below a floor raised later is `SpotRepricing`'s, with notice."""
        waiting = any(Tier.parse(r.spec.tier) is Tier.SPOT for r in pending)
        if self.spot_floors is None or not waiting:
            return None
        return self.spot_floors(uow, datetime.fromtimestamp(now_s, UTC))
