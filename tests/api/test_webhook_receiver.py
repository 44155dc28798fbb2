"""The SDK's receiver side checks exactly the server's signatures (`suanli.client.webhooks`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from suanli.app.records import RentalEvent, SentEvent, Webhook
from suanli.app.webhooks import SIGNATURE_HEADER, payload, signature
from suanli.client import webhooks as receiver
from suanli.client.webhooks import events, verify

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_a_delivery_verifies_under_its_secret_only_and_its_events_read_back() -> None:
    hook = Webhook("whk_1", "ten_1", "https://example.com/hook", "whsec_right", AT, 0)
    sent = [SentEvent(7, "rnt_a", RentalEvent(AT, "stopped", "time_limit", "stopped at its max duration"))]
    body = payload(hook, sent)
    sent_at_s = int(AT.timestamp())
    header = signature(hook.secret, body, sent_at_s)
    assert header.startswith(f"t={sent_at_s},sha256=")
    assert verify("whsec_right", body, header, now_s=sent_at_s + 1)
    assert not verify("whsec_wrong", body, header, now_s=sent_at_s)
    assert not verify("whsec_right", body + b" ", header, now_s=sent_at_s)  # the body as received
    assert not verify("whsec_right", body, None) and not verify("whsec_right", body, "")
    for mangled in (header.partition(",")[2], header.partition(",")[0], "t=x,sha256=00", "garbage"):
        assert not verify("whsec_right", body, mangled, now_s=sent_at_s)
    (event,) = events(body)
    assert (event["id"], event["rental_id"], event["kind"], event["reason"]) == (
        7,
        "rnt_a",
        "stopped",
        "time_limit",
    )
    assert event["at"] == AT.isoformat()
    assert receiver.SIGNATURE_HEADER == SIGNATURE_HEADER  # the header the server sets is the one read


def test_a_delivery_replayed_later_or_with_another_time_is_refused() -> None:
    """The time is signed with the body: a captured delivery cannot be sent again later, nor re-dated."""
    hook = Webhook("whk_1", "ten_1", "https://example.com/hook", "whsec_right", AT, 0)
    body = payload(hook, [SentEvent(8, "rnt_a", RentalEvent(AT, "placed", None, "placed"))])
    sent_at_s = int(AT.timestamp())
    header = signature(hook.secret, body, sent_at_s)
    assert verify("whsec_right", body, header, now_s=sent_at_s + 300)
    assert verify("whsec_right", body, header, now_s=sent_at_s - 300)  # the receiver's clock a little behind
    assert not verify("whsec_right", body, header, now_s=sent_at_s + 301)  # replayed after 5 min
    assert not verify("whsec_right", body, header, now_s=sent_at_s - 301)
    assert verify("whsec_right", body, header, now_s=sent_at_s + 3600, tolerance_s=7200)
    redated = header.replace(f"t={sent_at_s}", f"t={sent_at_s + 3600}")
    assert not verify("whsec_right", body, redated, now_s=sent_at_s + 3600)
    assert verify("whsec_right", body, signature(hook.secret, body, int(time.time())))  # the clock's now


def test_the_readmes_receiver_example_runs_as_written(capsys) -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("A webhook's receiver checks each delivery", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, object] = {"WEBHOOK_SECRET": "whsec_readme"}
    exec(compile(snippet, "README.md", "exec"), scope)
    hook = Webhook("whk_1", "ten_1", "https://example.com/hook", "whsec_readme", AT, 0)
    body = payload(hook, [SentEvent(3, "rnt_b", RentalEvent(AT, "failed", None, "exit code 2"))])
    on_delivery = scope["on_delivery"]
    now_s = int(time.time())
    signed = {"X-Suanli-Signature": signature("whsec_readme", body, now_s)}
    assert on_delivery(body, signed) == 204  # type: ignore[operator]
    assert on_delivery(body, {"X-Suanli-Signature": signature("whsec_other", body, now_s)}) == 401  # type: ignore[operator]
    stale = {"X-Suanli-Signature": signature("whsec_readme", body, now_s - 3600)}
    assert on_delivery(body, stale) == 401  # type: ignore[operator]
    assert capsys.readouterr().out == "rnt_b failed exit code 2\n"
