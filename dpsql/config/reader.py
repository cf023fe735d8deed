"""Reading a policy's values: exact rationals from what a human wrote, and a section reader that
names the place and the fix of every mistake."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import PolicyError


def exact(value: float | int | str | Fraction) -> Fraction:
    """The exact rational a human meant: 0.001 is 1/1000, not the nearest binary double.

    Budgets are summed exactly (DESIGN §5); reading a float through its shortest decimal
    representation is what makes a thousand queries of 0.001 add up to exactly 1.
    """
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} is not finite")
        return Fraction(repr(value))
    return Fraction(value)


class _Reader:
    """Reads one section of the TOML document, naming the place of every mistake."""

    def __init__(self, path: Path, where: str, data: Mapping[str, Any]):
        self.path, self.where, self.data = path, where, data

    def fail(self, what: str, fix: str) -> PolicyError:
        return PolicyError(f"{self.path}: {self.where}: {what}", hint=fix)

    def unknown_keys(self, allowed: Iterable[str]) -> None:
        extra = sorted(set(self.data) - set(allowed))
        if extra:
            raise self.fail(
                f"unknown key {extra[0]!r}",
                f"allowed keys here are: {', '.join(sorted(allowed))}",
            )

    def number(
        self,
        key: str,
        default: Any = None,
        *,
        positive: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> Fraction | None:
        if key not in self.data:
            return default
        raw = self.data[key]
        try:
            value = exact(raw)
        except (ValueError, TypeError):
            raise self.fail(
                f"{key} = {raw!r} is not a finite number", f"write {key} as a number, e.g. {key} = 1.0"
            ) from None
        if positive and value <= 0:
            raise self.fail(f"{key} = {raw} must be greater than 0", f"set {key} to a positive number")
        if minimum is not None and value < minimum:
            raise self.fail(f"{key} = {raw} is below {minimum}", f"set {key} to at least {minimum}")
        if maximum is not None and value > maximum:
            raise self.fail(f"{key} = {raw} is above {maximum}", f"set {key} to at most {maximum}")
        return value

    def integer(self, key: str, default: int) -> int:
        raw = self.data.get(key, default)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise self.fail(f"{key} = {raw!r} must be a whole number of at least 1", f"for example {key} = {default}")
        return raw

    def choice(self, key: str, default: str, options: Iterable[str]) -> str:
        raw = self.data.get(key, default)
        options = tuple(options)
        if raw not in options:
            raise self.fail(
                f"{key} = {raw!r} is not one of {', '.join(options)}", f"set {key} to one of: {', '.join(options)}"
            )
        return raw
