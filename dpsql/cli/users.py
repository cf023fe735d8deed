"""`dpsql users`: analysts' logins (SCRAM-SHA-256 verifiers in the ledger database)."""

from __future__ import annotations

import secrets
import sys
import time

import click

from ..config import load_policy
from ..errors import Error, invalid_parameter
from ..ledger import open_ledger
from ..server.wire.scram import make_verifier
from .common import (
    _fail,
    _ledger,
    _policy,
)
from .group import main


@main.group()
def users() -> None:
    """Manage analysts' logins (SCRAM-SHA-256 verifiers in the ledger database)."""


@users.command("add")
@_policy
@_ledger
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@click.option(
    "--role",
    type=click.Choice(["analyst", "admin"]),
    default="analyst",
    show_default=True,
    help="A label kept with the login (users list); what a login may see is the policy's (officer = true).",
)
def users_add(policy: str, ledger: str | None, name: str, password_stdin: bool, role: str) -> None:
    """Create or update NAME's login (a random password is printed unless --password-stdin)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        pol.user(name)
        password = sys.stdin.readline().rstrip("\n") if password_stdin else secrets.token_urlsafe(12)
        if not password:
            raise invalid_parameter("the password is empty")
        open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity).set_user(
            name, make_verifier(password), role
        )
    except Error as e:
        _fail(e)
        return
    click.echo(f"login for {name} ({role}) saved" + ("" if password_stdin else f"; password {password}"))


@users.command("list")
@_policy
@_ledger
def users_list(policy: str, ledger: str | None) -> None:
    """Analysts with a login."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        rows = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity).list_users()
    except Error as e:
        _fail(e)
        return
    for name, role, created in rows:
        click.echo(
            f"{name}\t{role}\t{time.strftime('%Y-%m-%d %H:%M', time.localtime(created))}"
            + ("" if name in pol.users else "\t(not in the policy: cannot query)")
        )


@users.command("remove")
@_policy
@_ledger
@click.argument("name")
def users_remove(policy: str, ledger: str | None, name: str) -> None:
    """Remove NAME's login (the budget and audit log stay)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        removed = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity).remove_user(name)
    except Error as e:
        _fail(e)
        return
    click.echo(f"login for {name} removed" if removed else f"{name} has no login")
    if not removed:
        sys.exit(1)
