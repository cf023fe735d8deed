"""The protocol's codes, declared once: every message type byte dpsql reads or writes, by
PostgreSQL's name for the message (protocol 3.0, "Message Formats" in PostgreSQL's manual), the
codes of a first message, the authentication requests and the fields of an error or notice.
The encoder (codec.py) and the message loop read these names; no other module spells a byte."""

from __future__ import annotations

from typing import Final


class Frontend:
    """Message types a client sends."""

    QUERY: Final = b"Q"
    PARSE: Final = b"P"
    BIND: Final = b"B"
    DESCRIBE: Final = b"D"
    EXECUTE: Final = b"E"
    CLOSE: Final = b"C"
    SYNC: Final = b"S"
    FLUSH: Final = b"H"
    TERMINATE: Final = b"X"
    COPY_DATA: Final = b"d"
    COPY_DONE: Final = b"c"
    COPY_FAIL: Final = b"f"
    SASL_RESPONSE: Final = b"p"  # SASLInitialResponse and SASLResponse (PasswordMessage's type)


class Backend:
    """Message types the server sends."""

    AUTHENTICATION: Final = b"R"
    BACKEND_KEY_DATA: Final = b"K"
    PARAMETER_STATUS: Final = b"S"
    READY_FOR_QUERY: Final = b"Z"
    ROW_DESCRIPTION: Final = b"T"
    DATA_ROW: Final = b"D"
    COMMAND_COMPLETE: Final = b"C"
    EMPTY_QUERY_RESPONSE: Final = b"I"
    ERROR_RESPONSE: Final = b"E"
    NOTICE_RESPONSE: Final = b"N"
    PARSE_COMPLETE: Final = b"1"
    BIND_COMPLETE: Final = b"2"
    CLOSE_COMPLETE: Final = b"3"
    NO_DATA: Final = b"n"
    PARAMETER_DESCRIPTION: Final = b"t"
    PORTAL_SUSPENDED: Final = b"s"
    COPY_OUT_RESPONSE: Final = b"H"
    COPY_DATA: Final = b"d"
    COPY_DONE: Final = b"c"


class Startup:
    """A first message has no type byte: its first int32 says what it is. An encryption request
    is answered by one byte, not a message."""

    PROTOCOL_3: Final = 196608
    SSL_REQUEST: Final = 80877103
    GSSENC_REQUEST: Final = 80877104
    CANCEL_REQUEST: Final = 80877102
    ENCRYPTION_ACCEPTED: Final = b"S"
    ENCRYPTION_REFUSED: Final = b"N"


class Authentication:
    """An AuthenticationRequest's first int32: what it asks or says."""

    OK: Final = 0
    SASL: Final = 10
    SASL_CONTINUE: Final = 11
    SASL_FINAL: Final = 12


class ErrorField:
    """The fields of an ErrorResponse or NoticeResponse that dpsql writes."""

    SEVERITY: Final = b"S"
    SEVERITY_NONLOCALIZED: Final = b"V"
    SQLSTATE: Final = b"C"
    MESSAGE: Final = b"M"
    HINT: Final = b"H"


def names(table: type) -> dict[bytes, str]:
    """A table's codes by name, read back: b"Q" -> "QUERY" (for messages about a client's bytes)."""
    return {v: k for k, v in vars(table).items() if isinstance(v, bytes)}


FRONTEND_NAMES: Final = names(Frontend)
BACKEND_NAMES: Final = names(Backend)
