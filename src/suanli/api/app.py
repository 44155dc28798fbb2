"""`create_app(settings)`: the FastAPI application, its lifespan (scheduler loop) and health and metrics."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST

from suanli.api import (
    errors,
    exec_attach,
    routes_accounts,
    routes_agents,
    routes_billing,
    routes_contract_offers,
    routes_dashboard,
    routes_execs,
    routes_fleet,
    routes_plans,
    routes_rentals,
    routes_sla,
    routes_webhooks,
)
from suanli.api.attach_relay import Relay
from suanli.api.body_limit import LimitBodySize
from suanli.api.wiring import build
from suanli.app.ports import Clock
from suanli.config import Settings
from suanli.store.attach_bus import AttachBus


def create_app(settings: Settings | None = None, clock: Clock | None = None) -> FastAPI:
    """Migrate the database, bootstrap the first admin, and wire the routes; the loop starts with the app."""
    services = build(settings or Settings(), clock)
    relay = Relay(AttachBus(services.engine))  # attached commands' frames, between processes on PostgreSQL

    def on_notify(*, ended: bool = False) -> None:
        """Another server process created, stopped or resized a rental: the leader's scheduler runs soon, its
        meter's pass over the ended rentals too when a rental `ended` (as `wake` does in one process)."""
        if services.loop.leadership.held:
            services.loop.signal()
            if ended and services.meter is not None:
                services.meter.signal_ended()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        services.loop.start()
        services.loop.signal()
        if services.reaper is not None:
            services.reaper.start()
        if services.meter is not None:
            services.meter.start()
        if services.webhook_loop is not None:
            services.webhook_loop.start()
        if services.wakeups is not None:
            services.wakeups.listen(on_notify)
        relay.start()
        try:
            yield
        finally:
            relay.stop()
            if services.wakeups is not None:
                services.wakeups.stop()
            if services.meter is not None:
                await services.meter.stop()
            if services.webhook_loop is not None:
                await services.webhook_loop.stop()
            if services.reaper is not None:
                await services.reaper.stop()
            await services.loop.stop()
            services.engine.dispose()

    app = FastAPI(title="suanli", version="0.1.0", lifespan=lifespan)
    app.state.services = services
    app.state.exec_relay = relay
    errors.install(app)
    fleet_put = ("PUT", "/v1/fleet")  # the fleet file checks its own, larger limit as it reads it
    limits = {fleet_put: routes_fleet.MAX_FLEET_BYTES}
    app.add_middleware(LimitBodySize, max_bytes=services.settings.max_body_bytes, route_limits_bytes=limits)
    app.include_router(routes_accounts.router)
    app.include_router(routes_fleet.router)
    app.include_router(routes_rentals.router)
    app.include_router(routes_contract_offers.router)
    app.include_router(routes_agents.router)
    app.include_router(routes_billing.router)
    app.include_router(routes_plans.router)
    app.include_router(routes_sla.router)
    app.include_router(routes_webhooks.router)
    app.include_router(routes_execs.router)
    app.include_router(exec_attach.router)
    routes_dashboard.install(app)

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, str | int | bool]:
        """Up; `leader`: whether this process runs the scheduler (one process of those on a database)."""
        return {"status": "ok", "pid": os.getpid(), "leader": services.loop.leadership.held}

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def metrics() -> Response:
        """Prometheus text; with several worker processes, the values of all of them (the leader's gauges)."""
        return Response(services.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return app
