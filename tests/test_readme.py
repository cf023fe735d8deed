"""The README states every key of the policy file (and its default), and its first-session
examples run on the sample as written."""

from __future__ import annotations

import re

from .conftest import ROOT


def _policy_keys() -> set[str]:
    """Every key the policy parser accepts, read from its own allow lists."""
    source = (ROOT / "dpsql" / "config.py").read_text()
    keys: set[str] = set()
    for block in re.findall(r"unknown_keys\(([^)]*)\)", source) + re.findall(r'allowed = (\{.*?\})\[kind\]', source, re.S):
        keys |= set(re.findall(r'"([a-z_]+)"', block))
    names = re.search(r'names = \(([^)]*)\)', source).group(1)
    return keys | set(re.findall(r'"([a-z_]+)"', names))


def test_every_policy_key_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    missing = sorted(k for k in _policy_keys() if not re.search(rf"\b{k}\b", readme))
    assert len(_policy_keys()) > 40
    assert not missing, f"policy keys the README does not mention: {missing}"


def test_the_defaults_table_covers_every_section():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("**Defaults**"):]
    table = table[:table.index("\n\n", table.index("| key | default |"))]
    for section in ("[engine]", "[privacy] filter", "[privacy] epsilon", "delta_reserve", "query_epsilon",
                    "query_delta", "mechanism", "max_groups", "max_contributions", "columns", "[users.X]",
                    "[ledger] path", "[limits]"):
        assert section in table, section
