"""Server settings from the environment (`SUANLI_*`): database URL, bootstrap admin key, timing, billing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from limits import parse_many
from platformdirs import user_data_dir
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from suanli.domain.policies import POLICY_NAMES


def default_database_url() -> str:
    """A SQLite file under the user's data directory (created on first use)."""
    directory = Path(user_data_dir("suanli", appauthor=False))
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'suanli.db'}"


# the tiers a rental can be preempted in (reserved is never a victim, but naming it is harmless)
NOTICE_TIERS = ("spot", "on_demand", "reserved")
# the databases the store runs on (`postgres://` and `postgresql://` mean psycopg 3 there)
DATABASE_BACKENDS = ("sqlite", "postgresql", "postgres")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SUANLI_", extra="ignore")

    database_url: str = Field(default_factory=default_database_url)

    @field_validator("database_url")
    @classmethod
    def _database_is_one_we_run_on(cls, url: str) -> str:
        """A URL of SQLite or PostgreSQL, so a typo is named at start, not as a driver's traceback."""
        try:
            backend = make_url(url).get_backend_name()
        except ArgumentError:
            backend = None
        if backend not in DATABASE_BACKENDS:
            raise ValueError(
                f"{url!r} is not a SQLite or PostgreSQL URL; e.g. postgresql+psycopg://user@host/suanli "
                "or sqlite:////var/lib/suanli/suanli.db"
            )
        return url

    bootstrap_admin_key: str | None = None
    webhook_interval_s: float = Field(default=2.0, gt=0, description="How often webhooks are sent.")
    webhook_private_ok: bool = Field(
        default=False,
        description="Let webhooks call loopback, private and link-local addresses (a test or a closed "
        "network); off, a tenant's webhook cannot reach the server's own network.",
    )
    scheduler_interval_s: float = Field(default=5.0, gt=0)
    api_rate: str = Field(
        default="50/second;2000/minute",
        description="Requests a tenant (all its keys together) may send, per window (the `limits` "
        "notation); past it, 429 with Retry-After, which the SDK and CLI wait out. Admins and providers "
        "are not limited. Empty: no limit.",
    )
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024,
        gt=0,
        description="The largest request body the server reads (the fleet file may be 8 MiB); a larger one "
        "is answered 413 before it is read or its key is checked.",
    )
    dry_run_rate: str = Field(
        default="5/second;120/minute",
        description="Dry runs a tenant may ask for, per window (the `limits` notation; each takes the "
        "scheduler's lock for a moment); past it, 429 with Retry-After. Empty: no limit.",
    )

    @field_validator("api_rate", "dry_run_rate")
    @classmethod
    def _rate_parses(cls, spec: str) -> str:
        """Rate limits in the `limits` notation, checked at start rather than when the app is wired."""
        if spec.strip():
            try:
                parse_many(spec)
            except ValueError as error:
                raise ValueError(
                    f"{spec!r} is not a rate limit ({error}); e.g. 50/second;2000/minute, or empty for none"
                ) from None
        return spec

    policy: str = Field(
        default="suanli",
        description=f"The placement policy of the scheduler's cycle: one of {', '.join(POLICY_NAMES)}.",
    )
    policy_seed: int = 0

    @field_validator("policy")
    @classmethod
    def _policy_exists(cls, policy: str) -> str:
        """Refuse an unknown policy at start: the cycle builds it by name and would fail every time."""
        if policy not in POLICY_NAMES:
            raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICY_NAMES)}")
        return policy

    queue: Literal["greedy", "backfill", "conservative"] = Field(
        default="greedy",
        description="greedy: each cycle places whatever fits, in tier, bid, fair share and age order (a "
        "cloud's on-demand behaviour); backfill: `suanli`'s queueing policy (fair share, response ratio, a "
        "blocked head keeps a reservation, only rentals with max_duration_s may pass it); "
        "conservative: fair share then age, and every pending rental is booked a start that no rental "
        "ranked after it may delay (Slurm's backfill), shown as its expected start; the plan is made again "
        "each cycle in priority order, so a higher tier, or a tenant further below its fair share, moves "
        "it.",
    )
    agent_heartbeat_interval_s: float = Field(default=5.0, gt=0)
    agent_missed_heartbeats: int = Field(default=3, ge=1, description="Down after this many intervals.")
    join_token_ttl_s: float = Field(default=3600.0, gt=0)
    preemption_notice_s: float = Field(
        default=30.0, gt=0, description="Seconds between a preemption notice and the kill."
    )
    preemption_notice_by_tier_s: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict, description='Per victim tier, e.g. {"spot": 30, "on_demand": 120} (JSON).'
    )

    @field_validator("preemption_notice_by_tier_s", mode="before")
    @classmethod
    def _notices_from_json(cls, notices: Any) -> Any:
        """The environment's text as JSON, with its mistake in words (not pydantic-settings' traceback)."""
        if not isinstance(notices, str):
            return notices
        try:
            return json.loads(notices) if notices.strip() else {}
        except json.JSONDecodeError:
            raise ValueError(
                f'{notices!r} is not a JSON object of seconds per tier, e.g. {{"spot": 30, "on_demand": 120}}'
            ) from None

    @field_validator("preemption_notice_by_tier_s")
    @classmethod
    def _notices_are_per_known_tier(cls, notices: dict[str, float]) -> dict[str, float]:
        """Every victim gets a notice: a tier named here exists, and its notice is some seconds long."""
        for tier, seconds in notices.items():
            if tier.strip().lower().replace("-", "_") not in NOTICE_TIERS:
                raise ValueError(f"unknown tier {tier!r}; use {', '.join(NOTICE_TIERS)}")
            if not seconds > 0:
                raise ValueError(f"the notice for {tier} must be above 0 seconds, not {seconds}")
        return notices

    commission_bp: int = Field(
        default=1500,
        ge=0,
        le=10_000,
        description="Platform commission on each charge, in basis points (15%).",
    )
    prepaid: bool = Field(
        default=True, description="Refuse new rentals whose minimum charge the tenant's balance cannot pay."
    )
    meter_interval_s: float = Field(default=30.0, gt=0, description="Seconds between meter runs (leader).")
    low_balance_grace_s: float = Field(
        default=3600.0,
        ge=0,
        description="Seconds a tenant below its floor keeps its running rentals before they stop.",
    )
