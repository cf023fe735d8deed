"""SCRAM-SHA-256 (RFC 5802 / 7677) as PostgreSQL speaks it, server side.

Verifiers are stored the way PostgreSQL stores them (`SCRAM-SHA-256$iter:salt$StoredKey:ServerKey`):
the server never holds a password. An unknown user gets a mock exchange with a salt derived
from a server secret, so the failure looks exactly like a wrong password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

ITERATIONS = 4096


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def _salted(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)


def make_verifier(password: str, salt: bytes | None = None, iterations: int = ITERATIONS) -> str:
    salt = salt or secrets.token_bytes(16)
    salted = _salted(password, salt, iterations)
    stored = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
    server = _hmac(salted, b"Server Key")
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored)}:{b64(server)}"


@dataclass(frozen=True)
class Verifier:
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @classmethod
    def parse(cls, text: str) -> "Verifier":
        scheme, rest = text.split("$", 1)
        if scheme != "SCRAM-SHA-256":
            raise ValueError("not a SCRAM-SHA-256 verifier")
        params, keys = rest.split("$", 1)
        iterations, salt = params.split(":", 1)
        stored, server = keys.split(":", 1)
        return cls(int(iterations), base64.b64decode(salt), base64.b64decode(stored), base64.b64decode(server))

    @classmethod
    def mock(cls, user: str, secret: bytes) -> "Verifier":
        """A stand-in for an unknown user: consistent per name, never verifiable."""
        salt = _hmac(secret, b"salt:" + user.encode())[:16]
        return cls(ITERATIONS, salt, secrets.token_bytes(32), secrets.token_bytes(32))


class ScramError(Exception):
    pass


class ScramServer:
    """One exchange: client-first -> server-first -> client-final -> server-final."""

    def __init__(self, verifier: Verifier):
        self.verifier = verifier
        self.nonce = ""
        self.client_first_bare = ""
        self.server_first = ""

    def first(self, client_first: str) -> str:
        parts = client_first.split(",", 2)
        if len(parts) < 3 or parts[0] not in ("n", "y"):
            raise ScramError(
                "channel binding is not supported" if parts and parts[0].startswith("p=") else "malformed message"
            )
        self.client_first_bare = parts[2]
        attrs = dict(a.split("=", 1) for a in self.client_first_bare.split(",") if "=" in a)
        client_nonce = attrs.get("r")
        if not client_nonce:
            raise ScramError("malformed message")
        self.nonce = client_nonce + base64.b64encode(secrets.token_bytes(18)).decode()
        v = self.verifier
        self.server_first = f"r={self.nonce},s={base64.b64encode(v.salt).decode()},i={v.iterations}"
        return self.server_first

    def final(self, client_final: str) -> str:
        without_proof, _, proof_part = client_final.rpartition(",p=")
        attrs = dict(a.split("=", 1) for a in without_proof.split(",") if "=" in a)
        if attrs.get("r") != self.nonce or not proof_part:
            raise ScramError("malformed message")
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        signature = _hmac(self.verifier.stored_key, auth_message)
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("malformed message") from None
        if len(proof) != len(signature):
            raise ScramError("authentication failed")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.verifier.stored_key):
            raise ScramError("authentication failed")
        return "v=" + base64.b64encode(_hmac(self.verifier.server_key, auth_message)).decode()


def password_matches(verifier: Verifier, password: str) -> bool:
    """Check a password typed into a form (the web console) against a stored verifier by playing
    the client's side of one SCRAM exchange with it: the proof is checked by ScramServer exactly
    as a wire login's is, and the server still never holds the password. A mock verifier never
    matches, at the cost of a real one."""
    scram = ScramServer(verifier)
    client_first_bare = "n=,r=" + base64.b64encode(secrets.token_bytes(18)).decode()
    server_first = scram.first("n,," + client_first_bare)
    without_proof = f"c=biws,r={scram.nonce}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    client_key = _hmac(_salted(password, verifier.salt, verifier.iterations), b"Client Key")
    signature = _hmac(hashlib.sha256(client_key).digest(), auth_message)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    try:
        scram.final(f"{without_proof},p={proof}")
    except ScramError:
        return False
    return True
