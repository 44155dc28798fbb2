"""The syntax of a container image reference, checked where a rental names its `image`.

The grammar is the OCI distribution spec's, as docker's `reference` package writes it:
`[host[:port]/]path[:tag][@digest]`, where each path component is lowercase letters and digits joined by `.`,
`_`, `__` or dashes, a tag is up to 128 word characters, dots and dashes, and a digest is `algorithm:hex`.
A catalogue key (`pytorch`, `pytorch:2.5.1`) is a reference too; whether its version exists is the server's
check, against the catalogue.
"""

from __future__ import annotations

import re

MAX_IMAGE_CHARS = 255  # the distribution spec's limit on a repository name; here on the whole reference

_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)
FORMS = "[registry[:port]/]repository[:tag][@digest], e.g. pytorch, pytorch:2.5.1 or ghcr.io/acme/trainer:1.2"


def image_reference(text: str) -> str:
    """`text` when it is an image reference; ValueError saying what is wrong otherwise."""
    if not text:
        raise ValueError(f"empty; give a catalogue key or an image reference: {FORMS}")
    if len(text) > MAX_IMAGE_CHARS:
        raise ValueError(f"{len(text)} characters; an image reference has at most {MAX_IMAGE_CHARS}")
    if any(char.isspace() or not char.isprintable() for char in text):
        raise ValueError(f"{text!r} contains whitespace or control characters; an image reference has none")
    if REFERENCE.fullmatch(text):
        return text
    if REFERENCE.fullmatch(_lowercase_repository(text)):
        raise ValueError(
            f"{text!r}: repository names are lowercase (OCI distribution spec); "
            f"did you mean {_lowercase_repository(text)!r}?"
        )
    raise ValueError(f"{text!r} is not an image reference: {FORMS}")


def _lowercase_repository(text: str) -> str:
    """`text` with its registry and repository lowercased, its tag and digest as they were."""
    name, at, digest = text.partition("@")
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        name, tag = name[:colon], name[colon:]
    else:
        tag = ""
    return f"{name.lower()}{tag}{at}{digest}"
