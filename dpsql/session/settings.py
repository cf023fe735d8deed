"""SET, RESET and SHOW of a session's settings: the dpsql.* ones, which shape its answers, and
the client's (PostgreSQL's names a driver sets), which are only echoed back."""

from __future__ import annotations

from ..accounting.cost import show as show_number
from ..accounting.filters import PAIR_FILTERS
from ..config import MECHANISMS, Policy, UserPolicy
from ..errors import ProgrammingError, forbidden, invalid_parameter
from ..prepare import CLIENT_SETTINGS, Settings, open_unit, positive, probability, within_cap
from ..sql.classify import SetCommand
from .result import Result

# The session's own settings (SET, SHOW, current_setting), named once for the hints that list them.
DP_SETTINGS = (
    "dpsql.epsilon",
    "dpsql.delta",
    "dpsql.mechanism",
    "dpsql.confidence",
    "dpsql.cache",
    "dpsql.reuse",
    "dpsql.planner",
    "dpsql.target_error",
    "dpsql.bounds",
)

# Settings that cannot change an answer's value or accuracy: every other dpsql.* setting is part of
# the answer cache's key, so a setting added later is keyed by default.
ANSWER_NEUTRAL = frozenset({"dpsql.cache", "dpsql.reuse"})

_READ_ONLY = {
    "server_version",
    "server_version_num",
    "server_encoding",
    "integer_datetimes",
    "max_identifier_length",
    "is_superuser",
    "session_authorization",
}


def default_settings(policy: Policy, user: UserPolicy) -> Settings:
    """A new session's settings for `user`: the policy's defaults (what SET ... TO DEFAULT restores)."""
    p = policy.privacy
    pairs = user.budget.filter in PAIR_FILTERS and (p.global_budget is None or p.global_budget.filter in PAIR_FILTERS)
    return Settings(
        epsilon=p.query_epsilon,
        delta=p.default_query_delta,
        mechanism=p.mechanism,
        confidence=p.confidence,
        exact_curve=pairs,
        bounds=p.bounds,
    )


def assign(settings: Settings, policy: Policy, user: UserPolicy, cmd: SetCommand) -> tuple[Settings, str]:
    """SET or RESET: the session's settings afterwards (the same object, changed, unless RESET
    ALL gives new defaults) and the command tag."""
    name, value = cmd.name, cmd.value
    s = settings
    if name == "all" and value is None:
        return default_settings(policy, user), "RESET"
    if name.startswith("dpsql."):
        key = name[len("dpsql.") :]
        d = default_settings(policy, user)
        if key == "epsilon":
            s.epsilon = d.epsilon if value is None else within_cap(policy, positive(value, name))
        elif key == "delta":
            s.delta = d.delta if value is None else probability(value, name)
        elif key == "mechanism":
            v = (value or d.mechanism).lower()
            if v not in MECHANISMS:
                raise invalid_parameter(f"invalid value for {name}: {value!r}", hint="use 'laplace' or 'gaussian'")
            s.mechanism = v
        elif key == "confidence":
            s.confidence = d.confidence if value is None else open_unit(value, name)
        elif key == "cache":
            s.cache = True if value is None else _boolean(value, name)
        elif key == "reuse":
            s.reuse = True if value is None else _boolean(value, name)
        elif key == "target_error":
            off = value is None or value.strip().lower() in ("0", "off", "none", "default")
            s.target_error = None if off else float(positive(value, name, f"SET {name} = 50, or off"))
        elif key == "bounds":
            v = (value or d.bounds).lower()
            if v not in ("policy", "auto"):
                raise invalid_parameter(
                    f"invalid value for {name}: {value!r}",
                    hint="'auto' chooses each query's limits with part of its epsilon; "
                    "'policy' uses the policy's limits as they are",
                )
            s.bounds = v
        elif key == "planner":
            v = (value or "filter").lower()
            if v not in ("filter", "pld"):
                raise invalid_parameter(
                    f"invalid value for {name}: {value!r}",
                    hint="'filter' splits a query's epsilon equally; 'pld' calibrates its aggregates jointly",
                )
            s.planner = v
        else:
            raise unknown_setting(name)
        return s, "RESET" if value is None else "SET"
    if name in CLIENT_SETTINGS and name not in _READ_ONLY:
        s.client[name] = CLIENT_SETTINGS[name] if value is None else value
        return s, "RESET" if value is None else "SET"
    raise forbidden(
        f'setting "{name}" cannot be changed through dpsql',
        hint=f"the engine's settings are fixed; {', '.join(DP_SETTINGS)} are yours to set",
    )


def values(s: Settings) -> dict[str, str]:
    """Every dpsql.* setting and its value, in DP_SETTINGS' order."""
    return {
        "dpsql.epsilon": show_number(s.epsilon),
        "dpsql.delta": show_number(s.delta),
        "dpsql.mechanism": s.mechanism,
        "dpsql.confidence": repr(s.confidence),
        "dpsql.cache": "on" if s.cache else "off",
        "dpsql.reuse": "on" if s.reuse else "off",
        "dpsql.planner": s.planner,
        "dpsql.target_error": "off" if s.target_error is None else repr(s.target_error),
        "dpsql.bounds": s.bounds,
    }


def setting(s: Settings, name: str) -> str | None:
    """A setting's value as SHOW gives it (current_setting() reads it too); None if unknown."""
    if name in s.client:
        return s.client[name]
    return values(s).get(name)


def show(s: Settings, name: str) -> Result:
    """SHOW name (SHOW ALL too); SHOW dpsql.budget is the budget's, not a setting."""
    dp = values(s)
    if name in dp:
        return Result([name.split(".", 1)[1]], ["VARCHAR"], [(dp[name],)], "SHOW")
    if name in s.client:
        return Result([name], ["VARCHAR"], [(s.client[name],)], "SHOW")
    if name == "all":
        rows = sorted({**s.client, **dp}.items())
        return Result(["name", "setting"], ["VARCHAR", "VARCHAR"], rows, "SHOW")
    raise unknown_setting(name)


def _boolean(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v in ("on", "true", "1", "yes"):
        return True
    if v in ("off", "false", "0", "no"):
        return False
    raise invalid_parameter(f"invalid value for {name}: {value!r}", hint="use on or off")


def unknown_setting(name: str) -> ProgrammingError:
    return ProgrammingError(
        f'unrecognized configuration parameter "{name}"',
        sqlstate="42704",
        hint=f"dpsql settings: {', '.join(DP_SETTINGS)}; SHOW dpsql.budget shows your remaining budget",
    )
