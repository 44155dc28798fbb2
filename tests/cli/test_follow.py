"""`suanli logs --tail`: the last lines, read from the end of the output, further back when too few came."""

from __future__ import annotations

from suanli.cli.follow import TAIL_READ_CHARS, last_lines
from suanli.wire.agent_schemas import LogResponse


class EndOfLog:
    """The logs endpoint over a fixed text: `tail` reads count back from its end."""

    def __init__(self, text: str) -> None:
        self.text, self.tails = text, []

    def logs(self, rental_id, offset=0, node=None, tail=None) -> LogResponse:
        self.tails.append(tail)
        start = max(0, len(self.text) - tail) if tail is not None else offset
        return LogResponse(
            rental_id=rental_id, offset=start, next_offset=len(self.text), data=self.text[start:], done=True
        )


def test_the_last_lines_come_from_the_end_and_the_end_is_where_following_goes_on() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    log = EndOfLog(text)
    assert last_lines(log, "rnt_1", 3, None) == (len(text), "line 997\nline 998\nline 999\n")
    assert log.tails == [TAIL_READ_CHARS[0]]
    assert last_lines(log, "rnt_1", 0, None) == (len(text), "")


def test_long_lines_make_it_read_further_back_and_an_unfinished_last_line_counts() -> None:
    long_line = "x" * 40_000 + "\n"
    text = "first\n" + long_line * 3 + "still writing"
    log = EndOfLog(text)
    offset, last = last_lines(log, "rnt_1", 3, None)
    assert (offset, last) == (len(text), long_line * 2 + "still writing")
    assert log.tails == list(TAIL_READ_CHARS)  # 64 KiB held under 3 whole lines: 1 MiB then


def test_a_short_output_is_all_there_is() -> None:
    assert last_lines(EndOfLog("only\n"), "rnt_1", 5, None) == (5, "only\n")
