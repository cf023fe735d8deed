"""What `dpsql serve` builds from its options: one Server (with its console), in one process or
in each of `--workers` processes. The options are plain values, so a supervisor hands them to
its workers unchanged and every worker serves exactly what a single process would."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import secrets
from dataclasses import dataclass
from typing import Any, Callable

from ..config import Policy, load_policy
from ..errors import invalid_parameter
from ..ledger import Ledger
from .listener import Limits, Server, tls_context
from .throttle import LoginThrottle
from .wire.scram import make_verifier
from .worker_link import WorkerLink


@dataclass(frozen=True)
class ServeOptions:
    policy: str
    ledger: str | None = None
    host: str = "127.0.0.1"
    port: int = 5433
    tls_cert: str | None = None
    tls_key: str | None = None
    require_tls: bool = False
    max_connections: int = 200
    max_pending: int = 64
    max_pending_per_address: int = 16
    login_timeout: float = 10.0
    login_delay: float = 0.25
    login_lockout_after: int = 10
    log_statements: bool = False
    http: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ServeOptions":
        return cls(**data)


def http_address(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets: [::1]:8080)."""
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise invalid_parameter(f"--http {text!r} is not HOST:PORT", hint="for example --http 127.0.0.1:8080")
    return host, int(port)


def checked(options: ServeOptions) -> Policy:
    """The policy, once the options agree with each other (raises Error with the fix)."""
    if options.http is not None:
        http_address(options.http)
    pol = load_policy(options.policy, ledger_path=options.ledger)
    if (options.tls_cert is None) != (options.tls_key is None):
        raise invalid_parameter("--tls-cert and --tls-key go together")
    if options.require_tls and options.tls_cert is None:
        raise invalid_parameter("--require-tls needs --tls-cert and --tls-key")
    if min(options.max_pending, options.max_pending_per_address) < 1:
        raise invalid_parameter(
            "--max-pending and --max-pending-per-address must be at least 1",
            hint="--max-pending-per-address is the share of --max-pending one address may take",
        )
    return pol


def ensure_logins(ledger: Ledger, pol: Policy, say: Callable[[str], None]) -> list[str]:
    """A login with a random password for each analyst of the policy who has none yet; `say`
    tells each password. The analysts given one, so that a server that cannot start removes them
    (their passwords would otherwise be lost, and the next start would create none)."""
    created = []
    for name in sorted(pol.users):
        if ledger.user_credentials(name) is None:
            password = secrets.token_urlsafe(12)
            ledger.set_user(name, make_verifier(password), "analyst")
            created.append(name)
            say(
                f"created login for analyst {name}: password {password} "
                f"(shown once; change it with: dpsql users add {name} --password-stdin)"
            )
    return created


def shared_cores(pol: Policy, workers: int, cores: int) -> Policy:
    """The policy a worker serves: unless [engine] threads says otherwise, DuckDB's threads in
    each of `workers` processes share the machine's cores (at least one each), instead of every
    worker starting a thread per core. Small queries under concurrency then spend less CPU in
    DuckDB's hand-offs between threads (the workers already run statements side by side)."""
    if workers <= 1 or pol.engine.kind != "duckdb" or pol.engine.threads is not None:
        return pol
    return dataclasses.replace(pol, engine=dataclasses.replace(pol.engine, threads=max(1, cores // workers)))


def build_server(options: ServeOptions, link: WorkerLink | None = None, secret: bytes | None = None) -> Server:
    """The Server these options describe. As one of `link.count` workers, the connection caps and
    the failures before a lockout are split among the workers (rounded up), so that together
    they admit what one process would, within a worker's rounding; the console is served by
    worker 0 only."""
    pol = checked(options)
    share = 1 if link is None else link.count
    pol = shared_cores(pol, share, os.cpu_count() or 1)
    limits = Limits(
        max_connections=math.ceil(options.max_connections / share),
        max_pending=math.ceil(options.max_pending / share),
        max_pending_per_address=math.ceil(options.max_pending_per_address / share),
        login_timeout=options.login_timeout,
    )
    tls = tls_context(options.tls_cert, options.tls_key) if options.tls_cert else None
    server = Server(pol, options.host, options.port, tls, options.require_tls, limits, link=link, secret=secret)
    server.throttle = LoginThrottle(
        base_delay=options.login_delay,
        max_delay=32 * options.login_delay,
        lockout_after=math.ceil(options.login_lockout_after / share),
    )
    if options.log_statements:
        server.log_statements = True
        handler = logging.StreamHandler()
        where = "" if link is None else f"worker {link.index} "
        handler.setFormatter(logging.Formatter(f"%(asctime)s {where}statement %(message)s"))
        logging.getLogger("dpsql.statements").addHandler(handler)
        logging.getLogger("dpsql.statements").setLevel(logging.INFO)
    if options.http is not None and (link is None or link.index == 0):
        from ..console import ConsoleService

        try:
            console = ConsoleService(
                server, *http_address(options.http), certfile=options.tls_cert, keyfile=options.tls_key
            )
        except BaseException:
            server.close()
            raise
        server.services.append(console)
    return server
