"""`suanli server`'s settings from the environment (`SUANLI_*`): a wrong value is refused at start, naming
the variable, before the server listens."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from suanli.api import server
from suanli.cli.main import app
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


@pytest.fixture
def never_listening(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server command that got as far as listening fails at once, instead of serving until killed."""

    def listen(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the server started")

    monkeypatch.setattr(server.uvicorn, "run", listen)


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("SUANLI_API_RATE", "abc", "SUANLI_API_RATE: 'abc' is not a rate limit"),
        ("SUANLI_DRY_RUN_RATE", "5/fortnight", "SUANLI_DRY_RUN_RATE: '5/fortnight' is not a rate limit"),
        ("SUANLI_QUEUE", "fifo", "SUANLI_QUEUE: Input should be 'greedy', 'backfill' or 'conservative'"),
        (
            "SUANLI_PREEMPTION_NOTICE_BY_TIER_S",
            "spot=30",
            "SUANLI_PREEMPTION_NOTICE_BY_TIER_S: 'spot=30' is not",
        ),
        (
            "SUANLI_PREEMPTION_NOTICE_BY_TIER_S",
            '{"spot": 0}',
            "SUANLI_PREEMPTION_NOTICE_BY_TIER_S: the notice for spot must be above 0 seconds",
        ),
        (
            "SUANLI_COMMISSION_BP",
            "20000",
            "SUANLI_COMMISSION_BP: Input should be less than or equal to 10000",
        ),
        ("SUANLI_DATABASE_URL", "mysql://db/x", "SUANLI_DATABASE_URL: 'mysql://db/x' is not a SQLite or"),
        ("SUANLI_DATABASE_URL", "not a url", "SUANLI_DATABASE_URL: 'not a url' is not a SQLite or"),
        (
            "SUANLI_POLICY",
            "Best_Fit",
            "SUANLI_POLICY: unknown policy 'Best_Fit'; choose from random, best-fit",
        ),
    ],
    ids=[
        "api-rate",
        "dry-run-rate",
        "queue",
        "notice-not-json",
        "notice-zero",
        "commission",
        "mysql",
        "word",
        "policy",
    ],
)
def test_a_bad_setting_stops_the_server_with_one_line_naming_it(
    never_listening, tmp_path: Path, variable: str, value: str, says: str
) -> None:
    """A malformed documented setting dumped a 56-516 line traceback and exited 1; bad usage is 2."""
    env = {"SUANLI_DATABASE_URL": f"sqlite:///{tmp_path / 'suanli.db'}", variable: value}
    done = CliRunner().invoke(app, ["server", "--port", "19300"], env=env)
    assert done.exit_code == 2, (done.exception, done.output)
    assert len(done.output.splitlines()) == 1 and done.output.startswith(f"error: {says}"), done.output


def test_every_bad_setting_is_named_at_once(never_listening, tmp_path: Path) -> None:
    env = {
        "SUANLI_DATABASE_URL": f"sqlite:///{tmp_path / 'suanli.db'}",
        "SUANLI_API_RATE": "abc",
        "SUANLI_QUEUE": "x",
    }
    done = CliRunner().invoke(app, ["server"], env=env)
    assert done.exit_code == 2, (done.exception, done.output)
    named = [line.split(":")[1].strip() for line in done.output.splitlines()]
    assert named == ["SUANLI_API_RATE", "SUANLI_QUEUE"], done.output


@pytest.mark.parametrize(
    "url",
    ["sqlite:////nonexistent-dir/suanli.db", "postgresql://suanli@127.0.0.1:19301/suanli"],
    ids=["sqlite", "pg"],
)
def test_a_database_the_server_cannot_reach_is_said_in_one_line(never_listening, url: str) -> None:
    """Not bad usage but an unreachable place (exit 4, as for a server the CLI cannot reach)."""
    done = CliRunner().invoke(app, ["server"], env={"SUANLI_DATABASE_URL": url})
    assert done.exit_code == 4, (done.exception, done.output)
    assert len(done.output.splitlines()) == 1, done.output
    assert done.output.startswith("error: SUANLI_DATABASE_URL: cannot reach the database at "), done.output
