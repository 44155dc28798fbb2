"""The web console at /ui/: static files that speak the REST API with the key a tenant signs in with."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

DASHBOARD_DIR = Path(__file__).parent / "dashboard"
# no inline script or style, nothing from elsewhere: a value that slipped into the page as HTML runs nothing
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
# the terminal's page: xterm.js sizes and colours its cells with <style> elements it writes, so styles (never
# scripts) may be inline there; nothing from elsewhere still
TERMINAL_PAGE = "/ui/terminal.html"
TERMINAL_POLICY = CONTENT_SECURITY_POLICY.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")


def install(app: FastAPI) -> None:
    """Serve the console at /ui/ (and send / there), with a strict content security policy."""
    app.mount("/ui", StaticFiles(directory=DASHBOARD_DIR, html=True), name="dashboard")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.middleware("http")
    async def secure_console(request: Request, call_next) -> Response:
        response = await call_next(request)
        if request.url.path.startswith("/ui"):
            terminal = request.url.path == TERMINAL_PAGE
            response.headers["Content-Security-Policy"] = (
                TERMINAL_POLICY if terminal else CONTENT_SECURITY_POLICY
            )
            response.headers["X-Content-Type-Options"] = "nosniff"
            response.headers["Referrer-Policy"] = "no-referrer"
        return response
