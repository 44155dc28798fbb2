"""The wire's shared ground: `WireModel` and `RequestModel` (what every body refuses or escapes), the error
body, the bounds and patterns of fields, their refusals in words (`problem_text`), and the field types
that check a time (`Moment`), an image (`ImageName`) and what execve takes (`Argv`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from suanli.wire.images import image_reference

TierName = Literal["reserved", "on_demand", "spot"]


LATEST_MOMENT = datetime(9000, 1, 1, tzinfo=UTC)  # far beyond any rental, and a year plus a month from 9999
MAX_DURATION_S = 10 * 366 * 86_400  # a declared run time: ten years at most (a start must stay a date)
# per node: far above any server, well inside a 64-bit column (PostgreSQL BIGINT) and exact in a float
MAX_CPU_MILLI, MAX_MEMORY_MIB = 10**9, 10**12
MAX_BID_MICROS = 10**15  # a bid per GPU-hour (a billion units)
MAX_MIN_GPUS = 64 * 256  # a least size: whole GPUs per node times nodes, at most
# a share is whole percents of a GPU: the unit the scheduler books (app.booking.SHARE_UNIT_MILLI)
SHARE_STEP_MILLI = 10
# what Linux's execve takes, which starts every workload and exec: one argument or `NAME=value` of at most
# MAX_ARG_STRLEN (131,072 bytes with its NUL), all of them (with their NULs) within ARG_MAX, 2 MiB under the
# default 8 MiB stack; a rental's command and env get half of that, the rest is the agent's own environment
EXEC_STRING_MAX_BYTES = 131_071
EXEC_TOTAL_MAX_BYTES = 1_048_576


def _in_range(moment: datetime) -> datetime:
    """A time the platform can store and compute with (UTC, before the year 9000)."""
    try:
        utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:
        raise ValueError("must be before the year 9000 (UTC)") from None
    if utc >= LATEST_MOMENT:
        raise ValueError("must be before the year 9000 (UTC)")
    return moment


TENANT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$"
RENTAL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
NAME_QUERY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*\*?$"  # a rental name, or a prefix of one ending in `*`
MONTH_PATTERN = r"^[0-9]{4}-[0-9]{2}$"
PAYOUT_CURSOR_PATTERN = r"^.+/[^/]*$"  # provider/rental: a provider name, then a rental id (no '/')
# what a value refused by a pattern should look like, said in words rather than as the regex
PATTERN_TEXT = {
    TENANT_NAME_PATTERN: "use letters, digits, spaces, '.', '_' and '-', starting with a letter or digit",
    RENTAL_NAME_PATTERN: "use letters, digits, '.', '_' and '-', starting with a letter or digit",
    NAME_QUERY_PATTERN: "a name (letters, digits, '.', '_' and '-', starting with a letter or digit), or "
    "the start of one followed by '*'",
    MONTH_PATTERN: "a month as yyyy-mm, e.g. 2026-12",
    PAYOUT_CURSOR_PATTERN: "a payouts page's cursor, provider/rental, as the Link header's next URL gives it",
}


BOUNDS = {
    "less_than_equal": ("at most", "le"),
    "greater_than_equal": ("at least", "ge"),
    "less_than": ("under", "lt"),
    "greater_than": ("over", "gt"),
}


def problem_text(problem: Mapping[str, Any], *, money_in_units: bool = False) -> str:
    """The message for one pydantic error, in words: for a value its pattern refused, what the value should
    be; for one out of bounds, the bound with its unit (a field in micros or seconds, by its name), money in
    currency units when `money_in_units` (the CLI, whose options take units); for one off its step, the
    step."""
    context = problem.get("ctx") or {}
    kind = str(problem.get("type", ""))
    if kind == "string_pattern_mismatch" and context.get("pattern") in PATTERN_TEXT:
        return PATTERN_TEXT[context["pattern"]]
    location = problem.get("loc") or ()
    name = str(location[-1]) if location else ""
    if kind in BOUNDS and isinstance(context.get(BOUNDS[kind][1]), int | float):
        words, key = BOUNDS[kind]
        limit = context[key]
        if "micros" in name:
            return f"{words} {limit / 1_000_000:,.4f}" if money_in_units else f"{words} {limit} micros"
        if name.endswith("_s"):
            days = limit / 86_400
            whole_days = limit >= 86_400 and days == int(days)
            return f"{words} {days:g} days" if whole_days else f"{words} {limit:g} s"
    if kind == "multiple_of" and isinstance(step := context.get("multiple_of"), int):
        unit = " milli (1% of a GPU)" if name == "share_milli" else ""
        return f"a multiple of {step}{unit}"
    message = str(problem.get("msg", "invalid value"))
    # a validator's own words, without pydantic's prefix
    return message.removeprefix("Value error, ") if kind == "value_error" else message


# a time in a request: a clear 4xx, never an overflow later (`+ 1 year`, epoch seconds, `astimezone`)
Moment = Annotated[datetime, AfterValidator(_in_range)]
# a container image: a catalogue key or a reference in the distribution spec's grammar (422 otherwise)
ImageName = Annotated[str, AfterValidator(image_reference)]


def exec_bytes(strings: list[str]) -> int:
    """What `strings` take of execve's ARG_MAX: each one's UTF-8 bytes and its NUL."""
    return sum(len(text.encode()) + 1 for text in strings)


def check_exec_strings(strings: list[str], kind: str, spent_bytes: int = 0) -> None:
    """Raise unless execve takes each of `strings` (one `kind`: an argument, a NAME=value) and, after the
    `spent_bytes` already taken, all of them together (it would fail with E2BIG on the node)."""
    for text in strings:
        if (size := len(text.encode())) > EXEC_STRING_MAX_BYTES:
            raise ValueError(
                f"{kind} of {size:,} bytes: execve takes at most {EXEC_STRING_MAX_BYTES:,} bytes in one"
            )
    if (total := spent_bytes + exec_bytes(strings)) > EXEC_TOTAL_MAX_BYTES:
        raise ValueError(
            f"the command and env take {total:,} bytes (each string's UTF-8 and its NUL): at most "
            f"{EXEC_TOTAL_MAX_BYTES:,} bytes"
        )


def _argv_fits_execve(command: list[str]) -> list[str]:
    check_exec_strings(command, "an argument")
    return command


# a command line the agent starts with execve: each argument and all of them within its limits (422 otherwise)
Argv = Annotated[list[str], AfterValidator(_argv_fits_execve)]


def _takes_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold a JSON `true`/`false` (a nested model checks its own fields)."""
    if annotation is bool or annotation is Any:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_takes_bool(arg) for arg in get_args(annotation))


def _holds(value: Any, found: Callable[[Any], bool]) -> bool:
    """Whether `value`, or anything in the lists and mappings it holds (keys included), is `found`."""
    if found(value):
        return True
    if isinstance(value, Mapping):
        return any(_holds(key, found) or _holds(item, found) for key, item in value.items())
    return isinstance(value, list | tuple) and any(_holds(item, found) for item in value)


def _nests_model(annotation: Any) -> bool:
    """Whether a field of this type holds a nested model, which checks its own fields' text."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_nests_model(arg) for arg in get_args(annotation))


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _has_nul(value: Any) -> bool:
    return isinstance(value, str) and "\x00" in value


# half of a UTF-16 pair alone (JSON's "\ud800"): Python holds it, but no UTF-8 text, column or answer can
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# what printed text cannot keep as it is: a NUL or a lone surrogate (each becomes one U+FFFD)
_UNKEEPABLE_IN_OUTPUT = re.compile("[\x00\ud800-\udfff]")


def _has_lone_surrogate(value: Any) -> bool:
    return isinstance(value, str) and LONE_SURROGATE.search(value) is not None


def escape_lone_surrogates(value: Any) -> Any:
    """`value` with each lone surrogate in its text (lists and mappings, keys included) written as its
    escape (`\\ud800`): what an answer sends of a row stored before requests were checked for them."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, Mapping):
        return {escape_lone_surrogates(key): escape_lone_surrogates(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(escape_lone_surrogates(item) for item in value)
    return value


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # fields of text a workload printed: a NUL or a lone surrogate there becomes U+FFFD (one character for
    # one), not a refusal
    nul_replaced: ClassVar[frozenset[str]] = frozenset()
    # what a client or an agent sends (`RequestModel`) refuses a lone surrogate; an answer escapes one
    refuses_lone_surrogates: ClassVar[bool] = False

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers_or_unstorable_text(cls, value: Any, info: ValidationInfo) -> Any:
        """A JSON `true` is never a number: pydantic's lax mode reads it as 1 (a 1-micro credit, a quota of
        1), and its strict mode would refuse the ISO times and arrays JSON sends as strings and lists. And no
        text holds a NUL (U+0000): PostgreSQL stores none, in text or JSON; nor a lone surrogate, which no
        UTF-8 answer can carry (every answer that quoted one failed, a node's heartbeat for good)."""
        if info.field_name is None:
            return value
        annotation = cls.model_fields[info.field_name].annotation
        if _holds(value, _is_bool) and not _takes_bool(annotation):
            raise ValueError("a number or text, not true or false")
        if info.field_name in cls.nul_replaced and isinstance(value, str):
            return _UNKEEPABLE_IN_OUTPUT.sub("\ufffd", value)
        if _holds(value, _has_nul):
            raise ValueError("text with a NUL character (U+0000), which nothing here holds")
        if not _nests_model(annotation) and _holds(value, _has_lone_surrogate):
            if cls.refuses_lone_surrogates:
                raise ValueError("text with a lone surrogate (U+D800 to U+DFFF), which UTF-8 cannot encode")
            return escape_lone_surrogates(value)
        return value


class RequestModel(WireModel):
    """What a client or an agent sends: text with a lone surrogate is refused (422 naming the field)."""

    refuses_lone_surrogates = True


class ErrorDetail(WireModel):
    nul_replaced = frozenset({"code", "message", "field"})  # a refusal may quote the NUL it refuses
    code: str = Field(description="Machine-readable code, e.g. not_found, invalid, conflict, unauthorized.")
    message: str
    field: str | None = Field(default=None, description="The request field at fault, when there is one.")


class ErrorResponse(WireModel):
    error: ErrorDetail
