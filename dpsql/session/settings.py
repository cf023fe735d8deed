"""SET, RESET and SHOW of a session's settings: the dpsql.* ones, which shape its answers, and
the client's (PostgreSQL's names a driver sets), which are only echoed back. Which settings
exist, their types, defaults and checks are setting_table.py's; this reads that table."""

from __future__ import annotations

from ..accounting.filters import PAIR_FILTERS
from ..config import Policy, UserPolicy
from ..errors import ProgrammingError, forbidden
from ..prepare import Settings
from ..sql.classify import SetCommand
from .result import Result
from .setting_table import BY_NAME, CLIENT_DEFAULTS, DP_SETTINGS, TYPES


def default_settings(policy: Policy, user: UserPolicy) -> Settings:
    """A new session's settings for `user`: the policy's defaults (what SET ... TO DEFAULT restores)."""
    p = policy.privacy
    charged = {user.budget.filter} | ({p.global_budget.filter} if p.global_budget is not None else set())
    return Settings(
        epsilon=p.query_epsilon,
        delta=p.default_query_delta,
        mechanism=p.mechanism,
        confidence=p.confidence,
        exact_curve=charged <= PAIR_FILTERS,
        additive=charged == {"basic"},
        bounds=p.bounds,
        client=dict(CLIENT_DEFAULTS),
    )


def assign(settings: Settings, policy: Policy, user: UserPolicy, cmd: SetCommand) -> tuple[Settings, str]:
    """SET or RESET: the session's settings afterwards (the same object, changed, unless RESET
    ALL gives new defaults) and the command tag."""
    name, value = cmd.name, cmd.value
    s = settings
    if name == "all" and value is None:
        return default_settings(policy, user), "RESET"
    st = BY_NAME.get(name)
    if name.startswith("dpsql."):
        if st is None:
            raise unknown_setting(name)
        assert st.field is not None
        # RESET, SET ... TO DEFAULT, and an empty choice: the policy's default
        if value is None or (st.type == "choice" and not value):
            new = getattr(default_settings(policy, user), st.field)
        else:
            new = TYPES[st.type].parse(value, st, policy)
        setattr(s, st.field, new)
        return s, "RESET" if value is None else "SET"
    if st is not None and st.shown and not st.read_only:
        s.client[name] = CLIENT_DEFAULTS[name] if value is None else value
        return s, "RESET" if value is None else "SET"
    raise forbidden(
        f'setting "{name}" cannot be changed through dpsql',
        hint=f"the engine's settings are fixed; {', '.join(DP_SETTINGS)} are yours to set",
    )


def values(s: Settings) -> dict[str, str]:
    """Every dpsql.* setting and its value, in DP_SETTINGS' order."""
    return {name: TYPES[BY_NAME[name].type].show(getattr(s, BY_NAME[name].field or "")) for name in DP_SETTINGS}


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


def unknown_setting(name: str) -> ProgrammingError:
    return ProgrammingError(
        f'unrecognized configuration parameter "{name}"',
        sqlstate="42704",
        hint=f"dpsql settings: {', '.join(DP_SETTINGS)}; SHOW dpsql.budget shows your remaining budget",
    )
