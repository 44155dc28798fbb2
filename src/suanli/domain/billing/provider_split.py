"""Provider shares: the provider part of a rental's charges split among the providers whose nodes earned it.

A rental's money accrues second by second at the rate in force; at each instant it is earned by the nodes
the rental holds then. So the provider part is attributed over time:

* `holders_over_time(held)`: from the spans each allocation was held (provider, GPU milli, from, to), a step
  function: from each instant the holdings changed on, the GPU milli held on each provider's nodes. An instant
  where nothing is held (a re-queued rental waiting: billed nothing) keeps the weights in force before it.
* `shares_to_date(provider_total_at, started_s, holders, now_s)`: each provider's cumulative share to
  `now_s`. The time from the start to `now_s` is cut at every change of holdings into spans; each span earns
  the growth of the cumulative provider total over it (`provider_total_at(span end) - provider_total_at(span
  start)`; the first span from 0: the 60-s minimum is earned by whoever held the rental at its start), and
  that span's amount is apportioned by the GPU milli held per provider in it (so, at one rate, by the
  GPU-seconds on each provider's nodes).
* `apportion(amount, weights)`: D'Hondt (highest averages): each provider gets at least the floor of its exact
  share and the remaining micros go one by one to the largest weight / (micros given + 1), ties to the
  provider first by name. Unlike largest remainder (Hamilton), it is house monotone: a larger amount never
  gives any provider less (no Alabama paradox), so a provider's share to date never falls as the charge
  grows, and a later charge never takes back a micro already credited.
* `charge_parts(shares, credited, provider_micros)`: one charge's part per provider, its share to date less
  what it was credited before. The parts sum to the charge's provider part exactly and are never negative,
  and each provider's total is its share at the last charge, however often the meter runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from suanli.domain.billing.errors import BillingError

Weights = tuple[tuple[str, int], ...]  # (provider, GPU milli held on its nodes), sorted by provider, each > 0
Holders = tuple[tuple[int, Weights], ...]  # (from_s, weights in force from then on), sorted by from_s


@dataclass(frozen=True, slots=True)
class Held:
    """GPU milli a rental held on one node of `provider` over [from_s, to_s) (`to_s` None: still held)."""

    provider: str
    gpu_milli: int
    from_s: int
    to_s: int | None = None


def holders_over_time(held: Iterable[Held]) -> Holders:
    """The GPU milli held per provider from each instant the holdings changed on; instants with nothing held
    and changes that leave every provider's milli as it was are left out."""
    changes: dict[int, dict[str, int]] = {}
    for span in held:
        if span.gpu_milli <= 0 or (span.to_s is not None and span.to_s <= span.from_s):
            continue
        at_start = changes.setdefault(span.from_s, {})
        at_start[span.provider] = at_start.get(span.provider, 0) + span.gpu_milli
        if span.to_s is not None:
            at_end = changes.setdefault(span.to_s, {})
            at_end[span.provider] = at_end.get(span.provider, 0) - span.gpu_milli
    steps: list[tuple[int, Weights]] = []
    current: dict[str, int] = {}
    for at_s in sorted(changes):
        for provider, milli in changes[at_s].items():
            current[provider] = current.get(provider, 0) + milli
        weights = tuple(sorted((p, m) for p, m in current.items() if m > 0))
        if weights and (not steps or steps[-1][1] != weights):
            steps.append((at_s, weights))
    return tuple(steps)


def providers_of(holders: Holders) -> frozenset[str]:
    """Every provider that held a part of the rental at some time."""
    return frozenset(provider for _, weights in holders for provider, _ in weights)


def apportion(amount_micros: int, weights: Weights) -> dict[str, int]:
    """`amount_micros` split in proportion to `weights` by D'Hondt (see the module docstring): the parts sum
    to the amount exactly; a larger amount never gives a provider less."""
    total = sum(weight for _, weight in weights)
    if amount_micros < 0:
        raise BillingError(f"cannot apportion a negative amount ({amount_micros} micros)")
    if total <= 0 or any(weight <= 0 for _, weight in weights):
        raise BillingError("apportioning needs positive weights")
    parts = {provider: amount_micros * weight // total for provider, weight in weights}
    for _ in range(amount_micros - sum(parts.values())):  # fewer than len(weights) micros are left
        best, best_weight = weights[0]
        for provider, weight in weights[1:]:  # weights are sorted by provider: ties go to the first
            if weight * (parts[best] + 1) > best_weight * (parts[provider] + 1):
                best, best_weight = provider, weight
        parts[best] += 1
    return parts


def shares_to_date(
    provider_total_at: Callable[[int], int], started_s: int, holders: Holders, now_s: int
) -> dict[str, int]:
    """Each provider's cumulative share of the provider total at `now_s` (`provider_total_at(now_s)`, a
    non-decreasing function of time), its spans apportioned by the holdings in force in each."""
    if not holders:
        raise BillingError("provider shares need the rental's holdings")
    in_force = holders[0][1]
    later: list[tuple[int, Weights]] = []
    for from_s, weights in holders:
        if from_s <= started_s:
            in_force = weights
        elif from_s < now_s:
            later.append((from_s, weights))
    shares: dict[str, int] = {}
    before = 0
    for until_s, following in [*later, (now_s, in_force)]:
        total = provider_total_at(until_s)
        for provider, micros in apportion(total - before, in_force).items():
            shares[provider] = shares.get(provider, 0) + micros
        before, in_force = total, following
    return shares


def charge_parts(
    shares: Mapping[str, int], credited: Mapping[str, int], provider_micros: int
) -> dict[str, int]:
    """One charge's provider part per provider: its share to date less what it was `credited` before.

    Those differences sum to `provider_micros` and none is negative whenever every earlier charge followed
    this rule. Charges posted by an earlier rule (all to the rental's first node's provider) can have
    credited a provider more than its share: then `provider_micros` is apportioned among the providers still
    owed, by what each is owed (or by their shares when none is), so the parts still sum to it exactly."""
    owed = {provider: share - credited.get(provider, 0) for provider, share in shares.items()}
    fair = all(amount >= 0 for amount in owed.values()) and set(credited) <= set(shares)
    if fair and sum(owed.values()) == provider_micros:
        return {provider: amount for provider, amount in owed.items() if amount > 0}
    if provider_micros == 0:
        return {}
    weights = tuple(sorted((p, amount) for p, amount in owed.items() if amount > 0))
    if not weights:
        weights = tuple(sorted((p, share) for p, share in shares.items() if share > 0))
    if not weights:
        weights = tuple((provider, 1) for provider in sorted(shares))
    return apportion(provider_micros, weights)
