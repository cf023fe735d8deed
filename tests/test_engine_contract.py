"""The engine contract (engines/base.py): every engine a policy can name is registered, subclasses
Engine and declares its Capabilities, and nothing probes an engine for undeclared attributes."""

from __future__ import annotations

import dataclasses
import re

from dpsql.config import ENGINES as KINDS
from dpsql.engines import ENGINES, Capabilities, Engine

from .conftest import ROOT


def test_every_engine_kind_a_policy_accepts_is_registered():
    assert set(ENGINES) == set(KINDS)
    for kind, cls in ENGINES.items():
        assert issubclass(cls, Engine) and cls.dialect == kind, kind
        assert isinstance(cls.capabilities, Capabilities), kind


def test_a_declared_capability_is_a_method_the_engine_overrides():
    """A flag set on a class means the engine wrote that method (not the base's NotImplementedError)."""
    methods = {
        "literal_sql": "literal_sql",
        "execute_reused": "execute_reused",
        "weighted_copy": "weighted_copy",
        "copy_totals": "copy_totals",
    }
    for cls in ENGINES.values():
        for flag, method in methods.items():
            if getattr(cls.capabilities, flag):
                assert getattr(cls, method) is not getattr(Engine, method), (cls.__name__, method)
    assert {f.name for f in dataclasses.fields(Capabilities)} >= set(methods)


def test_nothing_probes_an_engine_with_getattr_or_hasattr():
    probes = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (ROOT / "dpsql").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\b(getattr|hasattr)\([^,]*engine\b", line)
    ]
    assert not probes, f"read engine.capabilities instead: {probes}"
