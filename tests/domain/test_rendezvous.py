"""The rendezvous port a rental gets: the one its id points at, else the next free one, wrapping round."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from suanli.domain.rendezvous import MASTER_PORTS, free_master_port, hashed_master_port


def test_the_hashed_port_is_stable_spread_and_clear_of_torchrun_and_ephemeral_ports() -> None:
    ports = {hashed_master_port(f"rnt_{i:04x}") for i in range(200)}
    assert len(ports) > 190 and all(20_000 <= p < 29_000 for p in ports)
    assert hashed_master_port("rnt_a") == hashed_master_port("rnt_a") != hashed_master_port("rnt_b")


def test_a_taken_port_moves_the_rental_to_the_next_free_one_wrapping_round_the_range() -> None:
    first = hashed_master_port("rnt_a")
    assert free_master_port("rnt_a", ()) == first
    assert free_master_port("rnt_a", {first, first + 1}) == first + 2
    last = MASTER_PORTS[-1]
    rental = next(f"rnt_{i}" for i in range(100_000) if hashed_master_port(f"rnt_{i}") == last)
    assert free_master_port(rental, {last}) == MASTER_PORTS.start
    assert free_master_port(rental, set(MASTER_PORTS)) == last  # all taken: its own, none better


@given(st.text(min_size=1, max_size=20), st.sets(st.sampled_from(MASTER_PORTS), max_size=50))
def test_the_port_is_never_taken_while_any_is_free(rental_id: str, taken: set[int]) -> None:
    port = free_master_port(rental_id, taken)
    assert port in MASTER_PORTS and port not in taken
