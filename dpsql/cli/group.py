"""The `dpsql` command group, which every command module adds its commands to."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="dpsql")
def main() -> None:
    """dpsql: differentially private SQL over your own database."""
