"""Paged lists' `Link: <...>; rel="next"` header (GET /v1/ledger, /v1/payouts, /v1/rentals)."""

from __future__ import annotations

from fastapi import Request, Response


def link_next(request: Request, response: Response, after: object, limit: int) -> None:
    """A page's `Link: <...>; rel="next"` header: this request's URL from past `after`, same `limit`."""
    next_url = request.url.include_query_params(after=after, limit=limit)
    response.headers["Link"] = f'<{next_url}>; rel="next"'
