"""What a statement returns, whatever the front end."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..answer_record import AnswerRecord


@dataclass
class Result:
    """Names, engine types, rows and command tag of an answer; `dp` what a DP answer carries
    beside its rows (cost, what is left, intervals, receipt, notices), a frozen record."""

    names: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    status: str = "SELECT 0"
    dp: AnswerRecord | None = None
