"""The protocol's codes are declared once (server/wire/codes.py): each side's message types are
distinct, they are PostgreSQL's, and no other module of the server spells a message type byte."""

from __future__ import annotations

import re

from dpsql.server.wire import codec, codes
from dpsql.server.wire.codes import Backend, Frontend

from .conftest import ROOT


def test_each_side_s_message_types_are_distinct_and_postgres_s():
    for table in (Frontend, Backend):
        found = [v for k, v in vars(table).items() if not k.startswith("_")]
        assert len(found) == len(set(found)) == len(codes.names(table))
        assert all(isinstance(v, bytes) and len(v) == 1 for v in found)
    # A few from PostgreSQL's "Message Formats", where a mistake would desynchronise every client.
    assert (Frontend.QUERY, Frontend.SYNC, Frontend.TERMINATE) == (b"Q", b"S", b"X")
    assert (Backend.READY_FOR_QUERY, Backend.ROW_DESCRIPTION, Backend.DATA_ROW) == (b"Z", b"T", b"D")
    assert codes.FRONTEND_NAMES[b"P"] == "PARSE" and codes.BACKEND_NAMES[b"1"] == "PARSE_COMPLETE"


def test_the_encoder_writes_the_table_s_codes():
    assert codec.ready("I")[:1] == Backend.READY_FOR_QUERY
    assert codec.command_complete("SELECT 1")[:1] == Backend.COMMAND_COMPLETE
    err = codec.error_response("42601", "bad", "fix it")
    assert err[:1] == Backend.ERROR_RESPONSE
    assert b"C42601\0" in err and b"Hfix it\0" in err and err.endswith(b"\0\0")
    assert codec.authentication(codes.Authentication.OK) == b"R\0\0\0\x08\0\0\0\0"


# A message type written or compared as a literal: codec.message(b"x" ...), kind == b"x", send(b"x").
_LITERAL = re.compile(r"""(message\(\s*b["'].["']|kind\s*(?:==|!=|in)\s*[({]?\s*b["'].["']|send\(\s*b["'].["']\s*\))""")


def test_no_server_module_spells_a_message_type_byte():
    offenders = [
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path in (ROOT / "dpsql" / "server").rglob("*.py")
        if path.name != "codes.py"
        for m in _LITERAL.finditer(path.read_text())
    ]
    assert not offenders, offenders
    # The check reads what it should: the old spelling is caught.
    assert _LITERAL.search('self.send(codec.message(b"1"))') and _LITERAL.search('if kind == b"X":')


def test_the_protocol_imports_nothing_of_serving_nor_of_the_session():
    """wire/ is the protocol alone: serving uses it, never the other way."""
    outside = []
    for path in (ROOT / "dpsql" / "server" / "wire").glob("*.py"):
        for m in re.finditer(r"^\s*from (\.+)(\w*)", path.read_text(), re.M):
            dots, name = m.groups()
            if len(dots) > 1 and not (len(dots) == 3 and name == "errors"):
                outside.append(f"{path.name}: {m.group(0).strip()}")
    assert not outside, outside
