"""`dpsql serve`: the wire protocol server, in one process or with --workers."""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..errors import Error
from ..ledger import open_ledger
from .common import (
    _fail,
    _ledger,
    _policy,
    _warn_loose,
)
from .group import main


@main.command()
@_policy
@_ledger
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option(
    "--port",
    default=5433,
    show_default=True,
    type=int,
    help="The port to listen on (0: a free one); clients connect with port=... in their connection string.",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="A PEM certificate (chain): clients may connect with TLS (sslmode=require); with --tls-key.",
)
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None, help="The certificate's key.")
@click.option("--require-tls", is_flag=True, help="Refuse connections that do not use TLS.")
@click.option("--max-connections", default=200, show_default=True, type=int, help="Authenticated sessions at once.")
@click.option(
    "--max-pending",
    default=64,
    show_default=True,
    type=int,
    help="Connections still logging in at once (a cap of their own, so they never take analysts' slots).",
)
@click.option(
    "--max-pending-per-address",
    default=16,
    show_default=True,
    type=int,
    help="Of those, from one client address. A full pool drops a connection idle for 1 s for a newcomer.",
)
@click.option("--login-timeout", default=10.0, show_default=True, type=float, help="Seconds from connect to logged in.")
@click.option(
    "--login-delay",
    default=0.25,
    show_default=True,
    type=float,
    help="Seconds a failed login's answer is held, doubling with the name's and the address's recent "
    "failures up to 32x; a right password is answered at once.",
)
@click.option(
    "--login-lockout-after",
    default=10,
    show_default=True,
    type=int,
    help="Failed logins in a row that lock a user name for 5 minutes; an address may spend twice as "
    "many (refilled at this many per 5 minutes) before only users who logged in from it recently "
    "are let in from it.",
)
@click.option(
    "--log-statements",
    is_flag=True,
    help="Log every statement's text and outcome (command tag or SQLSTATE) to standard error: what "
    "tools send, never the values answered.",
)
@click.option(
    "--http",
    "http",
    default=None,
    metavar="HOST:PORT",
    help="Also serve the web console (budgets, history, EXPLAIN, audit log) here, e.g. 127.0.0.1:8080; "
    "over HTTPS with --tls-cert/--tls-key.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes sharing the port and the ledger, to use more than one core (about one per "
    "core). Each has its own engine, memory limit and weighted copies; the connection caps and "
    "the failed logins before a lockout are split among them.",
)
def serve(
    policy: str,
    ledger: str | None,
    host: str,
    port: int,
    tls_cert: str | None,
    tls_key: str | None,
    require_tls: bool,
    max_connections: int,
    max_pending: int,
    max_pending_per_address: int,
    login_timeout: float,
    login_delay: float,
    login_lockout_after: int,
    log_statements: bool,
    http: str | None,
    workers: int,
) -> None:
    """Serve the PostgreSQL wire protocol: psql, JDBC, ODBC and every Postgres driver connect unchanged."""
    from ..server.launch import ServeOptions, build_server, checked, ensure_logins
    from ..server.listener import run

    options = ServeOptions(
        policy,
        ledger,
        host,
        port,
        tls_cert,
        tls_key,
        require_tls,
        max_connections,
        max_pending,
        max_pending_per_address,
        login_timeout,
        login_delay,
        login_lockout_after,
        log_statements,
        http,
    )
    store = None
    passwords: list[str] = []  # told once the port is bound
    try:
        if workers > 1:  # the supervisor keeps the ledger open: its writer writes every worker's charges
            pol = checked(options)
            store = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
            created = ensure_logins(store, pol, passwords.append)
        else:
            server = build_server(options)
            pol = server.policy
            created = ensure_logins(server.ledger, pol, passwords.append)
        _warn_loose(store if workers > 1 else server.ledger)
    except Error as e:
        if store is not None:
            store.close()
        _fail(e)
        return

    def announce(bound: int, console: str | None) -> None:
        for line in passwords:
            click.echo(line)
        passwords.clear()
        processes = f", {workers} workers" if workers > 1 else ""
        click.echo(
            f"dpsql {__version__} serving {pol.path} on {host}:{bound} "
            f"({len(pol.tables)} tables, {len(pol.users)} analysts{', TLS' if tls_cert else ''}{processes})"
        )
        click.echo(
            f'connect with: psql "host={host} port={bound} dbname=dpsql user={next(iter(sorted(pol.users)), "NAME")}"'
        )
        if console is not None:
            click.echo(f"privacy console: {console} (the same logins)")

    def take_back(ledger) -> None:
        """Not announced (the port was not bound, or the workers did not start): the logins this
        start created are removed, since their passwords were never shown; the next start
        creates them again."""
        if passwords:
            for name in created:
                ledger.remove_user(name)

    if workers == 1:  # announced once the port is bound: a port in use is an error, not a greeting
        try:
            run(server, ready=lambda: announce(server.port, server.console_url()))
        except Error as e:
            take_back(server.ledger)
            server.close()
            _fail(e)
        return
    from ..server.supervisor import Supervisor

    try:
        status = Supervisor(options, workers, say=lambda text: click.echo(text, err=True), ledger=store).run(announce)
    except Error as e:
        _fail(e)
        return
    finally:
        take_back(store)
        store.close()
    sys.exit(status)
