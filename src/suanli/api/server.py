"""`serve(host, port)`: run the API with uvicorn (the `suanli server` command calls this)."""

from __future__ import annotations

import uvicorn

from suanli.api.app import create_app
from suanli.config import Settings


def serve(host: str, port: int, settings: Settings | None = None) -> None:
    # no per-request access log: it costs a large share of a small request's time; errors still log
    uvicorn.run(create_app(settings or Settings()), host=host, port=port, log_level="info", access_log=False)
