"""`suanli server`'s settings from the environment (`SUANLI_*`): a wrong value is refused at start, naming
the variable, before the server listens."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from suanli.config import Settings
from suanli.domain.policies import POLICY_NAMES


@pytest.mark.parametrize("policy", ["bogus", "Best_Fit", ""])
def test_an_unknown_policy_is_refused_naming_the_ones_there_are(policy, monkeypatch) -> None:
    """A wrong SUANLI_POLICY started a healthy-looking server whose every scheduling cycle crashed: rentals
    stayed pending for ever and dry runs were a 500."""
    monkeypatch.setenv("SUANLI_POLICY", policy)
    with pytest.raises(
        ValidationError, match=f"unknown policy {policy!r}; choose from random, best-fit, fgd"
    ):
        Settings(database_url="sqlite://")


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_every_policy_there_is_may_be_chosen(policy, monkeypatch) -> None:
    monkeypatch.setenv("SUANLI_POLICY", policy)
    assert Settings(database_url="sqlite://").policy == policy
