"""Schemathesis over /openapi.json with an admin key, on SQLite: no input makes the server answer 5xx."""

from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings

from suanli.api.app import create_app
from suanli.config import Settings

ADMIN_KEY = "sk_admin_bootstrap_for_fuzz"
FLEET = (Path(__file__).resolve().parents[2] / "examples" / "fleet.toml").read_text()


def _app():
    database = Path(tempfile.mkdtemp(prefix="suanli-fuzz-")) / "suanli.db"
    app = create_app(Settings(database_url=f"sqlite:///{database}", bootstrap_admin_key=ADMIN_KEY))
    app.state.services.fleet.put(app.state.services.tenants.authenticate(ADMIN_KEY), FLEET)
    return app


# `PUT /v1/fleet` takes a fleet TOML file: generated strings go as the text they are, so garbage TOML is
# fuzzed too (without this, schemathesis skips the TOML body as a media type it cannot write)
schemathesis.serializer.alias("application/toml", "text/plain")
schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case) -> None:
    response = case.call(headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert response.status_code < 500, (case.method, case.path, response.text[:500])
