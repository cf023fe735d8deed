"""Every setting a session knows, declared once: one frozen record per setting, in one table.
SET, RESET, SHOW, SHOW ALL and current_setting (settings.py), the hints that name the dpsql.*
settings, the answer cache's key (answer_cache.py), the ParameterStatus messages a client gets at
start-up (server/login.py) and the README's list (checked by tests/test_settings_table.py) all
read it: a setting added here is settable, shown, validated, keyed and documented.

Two kinds: dpsql.* settings shape answers (a value is read by its type's parser, checked as a
refusal that charges nothing, and kept in the session's Settings); PostgreSQL's client settings
are accepted and echoed back only (drivers set them), never passed to an engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..accounting.cost import show as show_number
from ..config import MECHANISMS, Policy
from ..errors import invalid_parameter
from ..prepare import open_unit, positive, probability, within_cap

DP_PREFIX = "dpsql."


@dataclass(frozen=True)
class Setting:
    """One setting. A dpsql.* setting's new-session value is the policy's (settings.default_settings
    reads `field` of the defaults); a client setting's is `default`."""

    name: str  # as SET and SHOW spell it
    type: str  # a key of TYPES (dpsql.*), or "text" (client settings)
    description: str
    default: str | None = None  # a client setting's value on a new session
    field: str | None = None  # dpsql.*: the attribute of prepare.Settings it sets
    choices: tuple[str, ...] = ()  # type "choice": the values allowed (lower case)
    hint: str | None = None  # type "choice": what an invalid value's error suggests
    example: str | None = None  # dpsql.*: a valid value, as the README shows it (SET name = example)
    answer_neutral: bool = False  # cannot change an answer's value or accuracy: not in the cache key
    read_only: bool = False  # SHOW only: SET is refused
    reported_as: str | None = None  # sent as ParameterStatus at start-up, under this name
    shown: bool = True  # False: only reported at start-up, not a setting SHOW knows

    @property
    def dp(self) -> bool:
        return self.name.startswith(DP_PREFIX)


@dataclass(frozen=True)
class Type:
    """How a dpsql.* setting's value is read from SET (a refusal names the fix) and shown."""

    parse: Callable[[str, Setting, Policy], Any]
    show: Callable[[Any], str]


_OFF = ("0", "off", "none", "default")


def _boolean(value: str, s: Setting, policy: Policy) -> bool:
    v = value.strip().lower()
    if v in ("on", "true", "1", "yes"):
        return True
    if v in ("off", "false", "0", "no"):
        return False
    raise invalid_parameter(f"invalid value for {s.name}: {value!r}", hint="use on or off")


def _choice(value: str, s: Setting, policy: Policy) -> str:
    v = value.lower()
    if v not in s.choices:
        raise invalid_parameter(f"invalid value for {s.name}: {value!r}", hint=s.hint)
    return v


def _positive_or_off(value: str, s: Setting, policy: Policy) -> float | None:
    if value.strip().lower() in _OFF:
        return None
    return float(positive(value, s.name, f"SET {s.name} = 50, or off"))


TYPES: dict[str, Type] = {
    "epsilon": Type(lambda v, s, policy: within_cap(policy, positive(v, s.name)), show_number),
    "probability": Type(lambda v, s, policy: probability(v, s.name), show_number),
    "open unit": Type(lambda v, s, policy: open_unit(v, s.name), repr),
    "boolean": Type(_boolean, lambda v: "on" if v else "off"),
    "choice": Type(_choice, str),
    "positive or off": Type(_positive_or_off, lambda v: "off" if v is None else repr(v)),
}


def _client(name: str, default: str, reported_as: str | None = None, read_only: bool = False) -> Setting:
    return Setting(
        name,
        "text",
        "PostgreSQL's client setting: accepted and shown, never passed to the engine",
        default=default,
        read_only=read_only,
        reported_as=reported_as,
    )


SETTINGS: tuple[Setting, ...] = (
    # dpsql.*, in the order SHOW ALL's sources and the hints list them
    Setting(
        "dpsql.epsilon",
        "epsilon",
        "epsilon each query spends (at most the policy's max_query_epsilon)",
        example="0.5",
        field="epsilon",
    ),
    Setting(
        "dpsql.delta",
        "probability",
        "delta each query may spend (Gaussian noise, partition selection)",
        example="1e-6",
        field="delta",
    ),
    Setting(
        "dpsql.mechanism",
        "choice",
        "the noise: laplace or gaussian",
        example="gaussian",
        field="mechanism",
        choices=MECHANISMS,
        hint="use 'laplace' or 'gaussian'",
    ),
    Setting(
        "dpsql.confidence",
        "open unit",
        "the confidence level of the intervals answers carry",
        example="0.9",
        field="confidence",
    ),
    Setting(
        "dpsql.cache",
        "boolean",
        "a repeated query gets its first answer again, free",
        example="off",
        field="cache",
        answer_neutral=True,
    ),
    Setting(
        "dpsql.reuse",
        "boolean",
        "a repeated query's exact result is kept per data version (noise fresh)",
        example="off",
        field="reuse",
        answer_neutral=True,
    ),
    Setting(
        "dpsql.planner",
        "choice",
        "filter: a query's epsilon split equally; pld: its aggregates jointly",
        example="pld",
        field="planner",
        choices=("filter", "pld"),
        hint="'filter' splits a query's epsilon equally; 'pld' calibrates its aggregates jointly",
    ),
    Setting(
        "dpsql.target_error",
        "positive or off",
        "the smallest epsilon meeting this 95% error on COUNT/SUM",
        example="50",
        field="target_error",
    ),
    Setting(
        "dpsql.bounds",
        "choice",
        "auto: limits chosen per query; policy: the policy's limits",
        example="policy",
        field="bounds",
        choices=("policy", "auto"),
        hint="'auto' chooses each query's limits with part of its epsilon; "
        "'policy' uses the policy's limits as they are",
    ),
    # PostgreSQL's client settings, as a new session has them
    _client("client_encoding", "UTF8", "client_encoding"),
    _client("datestyle", "ISO, MDY", "DateStyle"),
    _client("timezone", "UTC", "TimeZone"),
    _client("search_path", '"$user", public'),
    _client("application_name", "", "application_name"),
    _client("extra_float_digits", "1"),
    _client("statement_timeout", "0"),
    _client("intervalstyle", "postgres", "IntervalStyle"),
    _client("standard_conforming_strings", "on", "standard_conforming_strings"),
    _client("client_min_messages", "notice"),
    _client("bytea_output", "hex"),
    _client("lock_timeout", "0"),
    _client("idle_in_transaction_session_timeout", "0"),
    _client("default_transaction_isolation", "read committed"),
    _client("transaction_isolation", "read committed"),
    _client("default_transaction_read_only", "on", "default_transaction_read_only"),
    _client("transaction_read_only", "on"),
    _client("server_version", "15.0", "server_version", read_only=True),
    _client("server_version_num", "150000", read_only=True),
    _client("server_encoding", "UTF8", "server_encoding", read_only=True),
    _client("integer_datetimes", "on", "integer_datetimes", read_only=True),
    _client("max_identifier_length", "63", read_only=True),
    _client("is_superuser", "off", "is_superuser", read_only=True),
    _client("jit", "off"),
    _client("geqo", "on"),
    _client("lc_messages", "C"),
    _client("lc_monetary", "C"),
    _client("lc_numeric", "C"),
    _client("lc_time", "C"),
    _client("row_security", "on"),
    _client("session_authorization", "", "session_authorization", read_only=True),
    Setting(
        "in_hot_standby",
        "text",
        "whether the server is a standby",
        default="off",
        read_only=True,
        reported_as="in_hot_standby",
        shown=False,
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
DP_SETTINGS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.dp)
# Settings that cannot change an answer's value or accuracy: every other dpsql.* setting is part of
# the answer cache's key, so a setting added later is keyed by default.
ANSWER_NEUTRAL = frozenset(s.name for s in SETTINGS if s.answer_neutral)
CLIENT_DEFAULTS: dict[str, str] = {s.name: s.default or "" for s in SETTINGS if not s.dp and s.shown}
# What a client is told at start-up, in PostgreSQL's order (by name, case aside).
REPORTED: tuple[Setting, ...] = tuple(
    sorted(
        (s for s in SETTINGS if s.reported_as is not None),
        key=lambda s: (s.reported_as or "").lower(),
    )
)
