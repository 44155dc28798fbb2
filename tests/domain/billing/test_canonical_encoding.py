"""The hash chain's canonical encoding is written out by hand (the meter hashes 100,000s of transactions a
pass): it must stay byte for byte the compact, key-sorted, ASCII JSON that earlier hashes were made of, and
`normalize` must keep `AccountId`'s own order."""

from __future__ import annotations

import json
import random

from suanli.domain.billing.ledger import (
    AccountId,
    AccountKind,
    Posting,
    Transaction,
    TxKind,
    canonical_encoding,
    normalize,
)

ALPHABET = 'ab:/ "\\\n\t\x00\x7f\u00e9\u2603\U0001f600'


def _reference(tx: Transaction) -> bytes:
    body = {
        "key": tx.key,
        "kind": tx.kind.value,
        "at_s": tx.at_s,
        "ref": tx.ref,
        "memo": tx.memo,
        "postings": [[str(p.account), p.amount_micros] for p in tx.postings],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def test_canonical_encoding_and_normalize_match_their_reference_definitions() -> None:
    draw = random.Random(20301)

    def text() -> str:
        return "".join(draw.choice(ALPHABET) for _ in range(draw.randrange(10)))

    checked = 0
    for _ in range(3000):
        postings = [
            Posting(AccountId(draw.choice(list(AccountKind)), text()), draw.randrange(-(10**18), 10**18) or 1)
            for _ in range(draw.randrange(1, 5))
        ]
        postings.append(Posting(AccountId.promotions(), -sum(p.amount_micros for p in postings)))
        merged: dict[AccountId, int] = {}
        for posting in postings:
            merged[posting.account] = merged.get(posting.account, 0) + posting.amount_micros
        assert normalize(postings) == tuple(Posting(a, m) for a, m in sorted(merged.items()) if m != 0)
        canonical = normalize(postings)
        if len(canonical) < 2:
            continue
        tx = Transaction(
            text(), draw.choice(list(TxKind)), draw.randrange(-(10**12), 10**12), canonical, text(), text()
        )
        assert canonical_encoding(tx) == _reference(tx)
        checked += 1
    assert checked > 2000
