"""The ops commands on the `flightdeck` parser (flightdeck.cli builds it)."""

from __future__ import annotations

from typing import Any

from flightdeck.ops import check, deploy, logs, status


def add_commands(commands: Any) -> None:
    """Register deploy, status, logs and check on the `flightdeck` parser's subcommands."""
    deploy.add_command(commands)
    status.add_command(commands)
    logs.add_command(commands)
    check.add_command(commands)
