"""`dpsql ledger`: init, verify and backup the ledger."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..config import load_policy
from ..errors import Error, invalid_parameter
from ..ledger import open_ledger
from ..ledger.integrity import identity_file
from .common import (
    _fail,
    _ledger,
    _policy,
    _warn_loose,
)
from .group import main


@main.group()
def ledger() -> None:
    """Create, verify and back up the ledger (budgets, audit log, logins)."""


@ledger.command("init")
@_policy
@_ledger
def ledger_init(policy: str, ledger: str | None) -> None:
    """Create the policy's ledger and record its identity (refused if one exists)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        marker = pol.ledger_identity
        if marker.exists() or (pol.ledger_url is None and pol.ledger_path.exists()):
            raise invalid_parameter(
                f"a ledger already exists for this policy ({marker if marker.exists() else pol.ledger_path})",
                hint="dpsql ledger verify checks it; remove it only to forget every budget spent",
            )
        led = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
    except Error as e:
        _fail(e)
        return
    click.echo(
        f"ledger {led.identity.ledger_id} created at {led.where}; its identity file is {marker} "
        "(keep it with the ledger's backups)"
    )


@ledger.command("verify")
@_policy
@_ledger
def ledger_verify(policy: str, ledger: str | None) -> None:
    """Check every record's chain and the totals: exit 1 if anything was edited or removed."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        led = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity, create=False)
        problems = led.verify()
    except Error as e:
        _fail(e)
        return
    _warn_loose(led)
    for p in problems:
        click.echo(f"PROBLEM: {p}", err=True)
    if problems:
        sys.exit(1)
    click.echo(f"ledger {led.identity.ledger_id} verified: every charge, grant and total is as recorded")


@ledger.command("backup")
@_policy
@_ledger
@click.argument("target", type=click.Path(dir_okay=False))
def ledger_backup(policy: str, ledger: str | None, target: str) -> None:
    """Copy the ledger to TARGET consistently, even while dpsql serves it (with its identity file)."""
    try:
        pol = load_policy(policy, ledger_path=ledger)
        if Path(target).exists():
            raise invalid_parameter(f"{target} exists", hint="name a new file")
        open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity, create=False).backup(Path(target))
    except Error as e:
        _fail(e)
        return
    click.echo(f"ledger backed up to {target} (identity in {identity_file(Path(target))})")
