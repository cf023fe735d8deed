"""`dpsql synopsis`: publish, list and drop published synopses."""

from __future__ import annotations

import json

import click

from ..config import load_policy
from ..engines import open_engine
from ..errors import Error
from ..ledger import open_ledger
from ..session import Session
from .common import (
    _fail,
    _ledger,
    _policy,
)
from .group import main


@main.group()
def synopsis() -> None:
    """Publish, list and drop the policy's synopses ([synopses.NAME]): one charge, then every
    query over one is answered from it, free."""


@synopsis.command("publish")
@_policy
@_ledger
@click.argument("name")
def synopsis_publish(policy: str, ledger: str | None, name: str) -> None:
    """Publish synopsis NAME for the data as it is now: charged once to its charged_to."""
    from ..synopses.publish import payers, publish, spec_of

    try:
        pol = load_policy(policy, ledger_path=ledger)
        session = Session(pol, payers(spec_of(pol, name), pol)[0])
        try:
            done = publish(session, name)
        finally:
            session.close()
    except Error as e:
        _fail(e)
        return
    click.echo(
        f"published synopsis {done.name}: {done.cells} cells from {done.marginals} measurements ({done.measured}), "
        f"charged epsilon {done.epsilon:g} (receipt {done.charge_id}), data version {done.data_version}, "
        f"in {done.seconds:.1f} s"
    )


@synopsis.command("list")
@_policy
@_ledger
@click.option("--json", "as_json", is_flag=True, help="Print the synopses as JSON.")
def synopsis_list(policy: str, ledger: str | None, as_json: bool) -> None:
    """The declared synopses, and which are published for the data as it is now."""
    from ..synopses import store

    try:
        pol = load_policy(policy, ledger_path=ledger)
        led = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
        engine = open_engine(pol)
        try:
            version, stored = engine.data_version(), store.listed(led)
        finally:
            engine.close()
            led.close()
    except Error as e:
        _fail(e)
        return
    rows = store.status(pol.synopses, stored, version)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no synopses are declared in the policy")
    for r in rows:
        click.echo(
            f"{r['name']}: {r['table']} by {', '.join(r['dimensions'])}; {', '.join(r['measures'])}; "
            f"epsilon {r['epsilon']:g} charged to {r['charged_to']}: {r['state']}"
            + (f" (measured: {r['measured']})" if r.get("measured") else "")
        )


@synopsis.command("drop")
@_policy
@_ledger
@click.argument("name")
def synopsis_drop(policy: str, ledger: str | None, name: str) -> None:
    """Stop answering from synopsis NAME (every data version). Its charge stays."""
    from ..synopses import store
    from ..synopses.publish import spec_of

    try:
        pol = load_policy(policy, ledger_path=ledger)
        spec_of(pol, name)
        led = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
        try:
            n = store.drop(led, name.lower())
        finally:
            led.close()
    except Error as e:
        _fail(e)
        return
    click.echo(f"dropped synopsis {name.lower()} ({n} published version(s)); its charge stays in the ledger")
