"""Contract offers: an operator offers one tenant a contract at a negotiated prepaid price; the tenant accepts
it (the contract is signed at that price, checked against the fleet as any signing is) or declines it.

An offer is checked against the fleet when it is made, but holds nothing: capacity goes to whoever signs
first, so an acceptance is checked again. It is open until `expires_at` (a week by default, never past the
window's end). Accepting is idempotent: the contract's id follows from the offer's, and the offer's row is
locked while it is accepted or declined, so two acceptances at once sign one contract and charge once.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from suanli.app.contracts import ContractOrder, ContractService
from suanli.app.errors import Conflict, Invalid, NotFound
from suanli.app.ids import as_utc, derived_id, new_id
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.postings import retrying
from suanli.app.records import Caller, ContractOffer, ContractRecord
from suanli.app.tenants import require_admin

OFFER_OPEN_FOR = timedelta(days=7)  # how long an offer stays open when the operator does not say


def offer_state(offer: ContractOffer, now: datetime) -> str:
    """open, accepted, declined, or expired: an open offer past its `expires_at`."""
    return "expired" if offer.state == "open" and now >= offer.expires_at else offer.state


class ContractOffers:
    def __init__(self, uow: UnitOfWorkFactory, clock: Clock, contracts: ContractService) -> None:
        self.uow, self.clock, self.contracts = uow, clock, contracts

    def offer(
        self, caller: Caller, order: ContractOrder, price_micros: int, expires_at: datetime | None
    ) -> ContractOffer:
        """Admin: offer `order` (its `tenant_id` is the offeree) at `price_micros`, open until `expires_at`;
        refused as signing it now would be, but for the payment (the offeree may top up before accepting)."""
        require_admin(caller)
        if order.tenant_id is None:
            raise Invalid("name the tenant the offer is for", field="tenant_id")
        record = self.contracts.draft(caller, order)
        now = record.created_at
        closes = min(as_utc(expires_at) if expires_at is not None else now + OFFER_OPEN_FOR, record.ends_at)
        if closes <= now:
            raise Invalid("must be in the future", field="expires_at")
        offer = ContractOffer(
            new_id("off"),
            record.tenant_id,
            record.gpu_model,
            record.count,
            record.region,
            record.starts_at,
            record.ends_at,
            price_micros,
            closes,
            now,
        )

        def work() -> ContractOffer:
            with self.uow() as uow:
                self.contracts.check(uow, record)
                uow.contract_offers.add(offer)
                uow.commit()
            return offer

        return retrying(work)

    def list(self, caller: Caller) -> list[ContractOffer]:
        """The caller's offers (an admin's: every tenant's), with `state` expired where it is."""
        now = self.clock.now()
        with self.uow() as uow:
            offers = uow.contract_offers.list(None if caller.is_admin else caller.tenant.id)
        return [replace(o, state=offer_state(o, now)) for o in offers]

    def accept(self, caller: Caller, offer_id: str) -> tuple[ContractRecord, bool]:
        """Sign the offered contract at the offered price from the offeree's cash: the contract and True, or
        the one an earlier acceptance signed and False. Refused when the offer was declined or has expired,
        or the fleet can no longer honour it (409), or the offeree cannot pay (402)."""

        def work() -> tuple[ContractRecord, bool]:
            now = self.clock.now()
            with self.uow() as uow:
                offer = self._offer(uow, caller, offer_id, only_offeree=True)
                if offer.state == "accepted":
                    signed = uow.contracts.get(offer.contract_id or "")
                    if signed is None:  # transferred contracts keep their id: this is never reached
                        raise NotFound(f"no contract for offer {offer_id}")
                    return signed, False
                _refuse_unless_open(offer, now)  # an offer expires by its window's end at the latest
                record = ContractRecord(
                    _contract_id(offer),
                    offer.tenant_id,
                    offer.gpu_model,
                    offer.count,
                    offer.region,
                    offer.starts_at,
                    offer.ends_at,
                    now,
                )
                signed, created = self.contracts.sign(uow, record, offer.price_micros)
                uow.contract_offers.decide(offer.id, "accepted", signed.id, now)
                uow.commit()
                return signed, created

        return retrying(work)

    def decline(self, caller: Caller, offer_id: str) -> ContractOffer:
        """The offeree declines an open offer (an admin withdraws it); declining again changes nothing."""

        def work() -> ContractOffer:
            now = self.clock.now()
            with self.uow() as uow:
                offer = self._offer(uow, caller, offer_id, only_offeree=False)
                if offer.state == "declined":
                    return offer
                _refuse_unless_open(offer, now)
                uow.contract_offers.decide(offer.id, "declined", None, now)
                uow.commit()
                return replace(offer, state="declined", decided_at=now)

        return retrying(work)

    def _offer(self, uow: UnitOfWork, caller: Caller, offer_id: str, *, only_offeree: bool) -> ContractOffer:
        """The offer, its row locked; NotFound for another tenant's (and, where `only_offeree`, an admin's
        that is not its own: an operator does not accept for a tenant, whose cash pays)."""
        offer = uow.contract_offers.get(offer_id, lock=True)
        mine = offer is not None and offer.tenant_id == caller.tenant.id
        if offer is None or not (mine or (caller.is_admin and not only_offeree)):
            raise NotFound(f"no offer {offer_id}", field="offer")
        return offer


def _refuse_unless_open(offer: ContractOffer, now: datetime) -> None:
    state = offer_state(offer, now)
    if state != "open":
        raise Conflict(f"offer {offer.id} is {state}", field="offer")


def _contract_id(offer: ContractOffer) -> str:
    """The contract an offer's acceptance signs: one id per offer, so accepting twice signs once."""
    return derived_id("ctr", "offer", offer.id)
