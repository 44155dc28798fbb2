"""The SDK's receiver side checks exactly the server's signatures (`suanli.client.webhooks`)."""

from __future__ import annotations

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
    header = signature(hook.secret, body)
    assert verify("whsec_right", body, header)
    assert not verify("whsec_wrong", body, header)
    assert not verify("whsec_right", body + b" ", header)  # the body as received, byte for byte
    assert not verify("whsec_right", body, None) and not verify(
        "whsec_right", body, header.removeprefix("sha256=")
    )
    (event,) = events(body)
    assert (event["id"], event["rental_id"], event["kind"], event["reason"]) == (
        7,
        "rnt_a",
        "stopped",
        "time_limit",
    )
    assert event["at"] == AT.isoformat()
    assert receiver.SIGNATURE_HEADER == SIGNATURE_HEADER  # the header the server sets is the one read


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
    assert on_delivery(body, {"X-Suanli-Signature": signature("whsec_readme", body)}) == 204  # type: ignore[operator]
    assert on_delivery(body, {"X-Suanli-Signature": signature("whsec_other", body)}) == 401  # type: ignore[operator]
    assert capsys.readouterr().out == "rnt_b failed exit code 2\n"
