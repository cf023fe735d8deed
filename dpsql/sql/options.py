"""Per-query privacy options written in the query text, read before sqlglot parses it.

Two spellings, both optional:

- a comment `/* dpsql: weights 3, 1 */`: relative shares of the query's epsilon for the
  select-list items that aggregate, in order (an item without a weight gets 1);
- BigQuery / ZetaSQL's differential privacy clause:

      SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, delta = 1e-6,
             max_groups_contributed = 2, privacy_unit_column = patient_id)
             diagnosis, AVG(cost, contribution_bounds_per_group => (0, 5000)) ...

  mapped onto dpsql's model: epsilon and delta are the query's; max_groups_contributed and
  max_rows_contributed may tighten the policy's limits, never loosen them; the privacy unit
  must be the policy's; contribution bounds become a clamp of the aggregated value (the policy's
  bounds still apply on top, so a query cannot widen them), and on COUNT the upper bound caps
  the rows a unit adds per group.

The clause is removed from the text and the bounds are rewritten as LEAST(GREATEST(x, lo), hi)
token by token, so what sqlglot then parses is ordinary SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

import sqlglot
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from ..errors import invalid_parameter, syntax_error, unsupported

_WEIGHTS = re.compile(r"dpsql\s*:\s*weights\s*=?\s*\[?\s*([^\]]*?)\s*\]?\s*$", re.I | re.S)
_BOUNDS = ("CONTRIBUTION_BOUNDS_PER_GROUP", "CONTRIBUTION_BOUNDS_PER_ROW")
_KNOWN = {"EPSILON", "DELTA", "MAX_GROUPS_CONTRIBUTED", "MAX_ROWS_CONTRIBUTED", "PRIVACY_UNIT_COLUMN"}


@dataclass(frozen=True)
class QueryOptions:
    weights: tuple[float, ...] | None = None
    epsilon: Fraction | None = None
    delta: Fraction | None = None
    max_groups: int | None = None
    max_rows: int | None = None
    privacy_unit: str | None = None
    # Chosen per query by dpsql itself (auto_bounds.py), never read from a text: a total bound on
    # a unit's rows, and clamps of aggregated values (the expression's postgres SQL, lower, upper).
    # Both may only tighten the policy's limits and bounds; a centre changes no bound.
    max_contributions: int | None = None
    clips: tuple[tuple[str, float, float], ...] = ()
    centres: tuple[tuple[str, float], ...] = ()  # an AVG's sum centred here (auto_mean), within its clamp


def extract(text: str, dialect: str) -> tuple[str, QueryOptions]:
    """The query text without dpsql/BigQuery options, and the options."""
    try:
        tokens = sqlglot.tokenize(text, read=dialect)
    except TokenError:
        return text, QueryOptions()  # the parser reports the syntax error
    weights = _weights(tokens)
    edits: list[tuple[int, int, str]] = []  # (start, end inclusive, replacement)
    opts: dict[str, object] = {}
    clause = _dp_clause(tokens)
    if clause is not None:
        start, end, opts = clause
        edits.append((start, end, " "))
    max_rows = opts.get("max_rows")
    for i, t in enumerate(tokens):
        if t.token_type == TokenType.VAR and t.text.upper() in _BOUNDS:
            edit, cap = _bounds(text, tokens, i)
            edits.append(edit)
            if cap is not None:
                max_rows = cap if max_rows is None else min(max_rows, cap)
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end + 1 :]
    return text, QueryOptions(
        weights=weights,
        epsilon=opts.get("epsilon"),
        delta=opts.get("delta"),
        max_groups=opts.get("max_groups"),
        max_rows=max_rows,
        privacy_unit=opts.get("privacy_unit"),
    )


def _weights(tokens: list[Token]) -> tuple[float, ...] | None:
    for t in tokens:
        for comment in t.comments:
            m = _WEIGHTS.match(comment.strip())
            if m:
                try:
                    values = tuple(float(w) for w in re.split(r"[,\s]+", m.group(1)) if w)
                except ValueError:
                    values = ()
                if not values or any(not (0 < w < float("inf")) for w in values):
                    raise invalid_parameter(
                        f"cannot read the weights in /* {comment.strip()} */",
                        hint="write positive numbers, one per select item: /* dpsql: weights 3, 1 */",
                    )
                return values
    return None


def _dp_clause(tokens: list[Token]) -> tuple[int, int, dict[str, object]] | None:
    for i in range(len(tokens) - 4):
        if (
            tokens[i].token_type == TokenType.SELECT
            and tokens[i + 1].token_type == TokenType.WITH
            and tokens[i + 2].text.upper() == "DIFFERENTIAL_PRIVACY"
        ):
            if tokens[i + 3].text.upper() != "OPTIONS" or tokens[i + 4].token_type != TokenType.L_PAREN:
                raise syntax_error(
                    "expected OPTIONS (...) after WITH DIFFERENTIAL_PRIVACY",
                    hint="SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, delta = 1e-6) ...",
                )
            close = _closing(tokens, i + 4)
            return tokens[i + 1].start, tokens[close].end, _options(tokens[i + 5 : close])
    return None


def _options(tokens: list[Token]) -> dict[str, object]:
    out: dict[str, object] = {}
    items: list[list[Token]] = [[]]
    for t in tokens:
        if t.token_type == TokenType.COMMA:
            items.append([])
        else:
            items[-1].append(t)
    for item in items:
        if not item:
            continue
        if len(item) < 3 or item[1].token_type not in (TokenType.EQ, TokenType.FARROW):
            raise syntax_error("cannot read the DIFFERENTIAL_PRIVACY options", hint="write OPTIONS (name = value, ...)")
        name = item[0].text.upper()
        value = "".join(t.text for t in item[2:])
        if name not in _KNOWN:
            raise unsupported(
                f"the DIFFERENTIAL_PRIVACY option {item[0].text} is not supported",
                hint="supported: " + ", ".join(sorted(n.lower() for n in _KNOWN)),
            )
        if name in ("EPSILON", "DELTA"):
            try:
                number = Fraction(value)
            except (ValueError, ZeroDivisionError):
                raise invalid_parameter(f"{item[0].text} = {value} is not a number") from None
            out[name.lower()] = number
        elif name == "PRIVACY_UNIT_COLUMN":
            out["privacy_unit"] = value.strip('"').lower()
        else:
            if not value.isdigit() or int(value) < 1:
                raise invalid_parameter(f"{item[0].text} must be a positive integer")
            out["max_groups" if name == "MAX_GROUPS_CONTRIBUTED" else "max_rows"] = int(value)
    return out


def _bounds(text: str, tokens: list[Token], i: int) -> tuple[tuple[int, int, str], int | None]:
    """`f(x, contribution_bounds_... => (lo, hi))` -> f(x clamped to [lo, hi], NULL kept); for
    COUNT, no clamp but a cap of hi rows per group."""
    name = tokens[i].text
    comma = i - 1
    if (
        tokens[comma].token_type != TokenType.COMMA
        or i + 2 >= len(tokens)
        or tokens[i + 1].token_type != TokenType.FARROW
    ):
        raise syntax_error(f"cannot read {name}", hint=f"write AVG(x, {name.lower()} => (low, high))")
    open_ = _opening(tokens, comma)
    if open_ is None or open_ == 0 or tokens[i + 2].token_type != TokenType.L_PAREN:
        raise syntax_error(f"{name} must be an argument of an aggregate", hint=f"AVG(x, {name.lower()} => (low, high))")
    close = _closing(tokens, i + 2)
    bounds = "".join(t.text for t in tokens[i + 3 : close]).split(",")
    try:
        lo, hi = (float(b) for b in bounds)
    except ValueError:
        raise syntax_error(f"{name} needs two numbers: (low, high)") from None
    if not lo <= hi:
        raise invalid_parameter(f"{name}: low {lo:g} is above high {hi:g}")
    func = tokens[open_ - 1].text.upper()
    arg = text[tokens[open_].end + 1 : tokens[comma].start].strip()
    if func == "COUNT":
        if hi < 1 or not hi.is_integer():
            raise invalid_parameter(f"{name} on COUNT needs a whole upper bound of at least 1")
        return (tokens[comma].start, tokens[close].end, ""), int(hi)
    clamp = f"CASE WHEN ({arg}) IS NULL THEN NULL ELSE LEAST(GREATEST({arg}, {lo!r}), {hi!r}) END"
    return (tokens[open_].end + 1, tokens[close].end, clamp), None


def _closing(tokens: list[Token], open_: int) -> int:
    depth = 0
    for j in range(open_, len(tokens)):
        if tokens[j].token_type == TokenType.L_PAREN:
            depth += 1
        elif tokens[j].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return j
    raise syntax_error("unbalanced parentheses")


def _opening(tokens: list[Token], at: int) -> int | None:
    depth = 0
    for j in range(at, -1, -1):
        if tokens[j].token_type == TokenType.R_PAREN:
            depth += 1
        elif tokens[j].token_type == TokenType.L_PAREN:
            if depth == 0:
                return j
            depth -= 1
    return None
