"""What a person reads of the agents' logs: one line per step of a delegation, and what went wrong.

The functions log JSON (Powertools), as on AWS. Every record with a `timeline` key is a step
of a delegation (task received, delegating, callback accepted, final answer...); a WARNING or
ERROR record is a problem. `readable()` turns either into one line; everything else (audit
lines, metric blobs, routine INFO) is for the full JSON log (`--json-logs`, `--log-dir`).
"""

from __future__ import annotations

import re
import time
from typing import Any

PROBLEM_LEVELS = frozenset({"WARNING", "ERROR", "CRITICAL"})
# The agent host's and moto's own start/stop lines (flightdeck.local.agent_host, moto_host):
# the CLI says the same in its own words.
_ROUTINE_TEXT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO |moto server on )")


def event_text(kind: str, record: dict[str, Any]) -> str:
    """The one-line text of a timeline record: its message's first line, and which delegation it is."""
    lines = str(record.get("message") or kind.replace("_", " ")).splitlines() or [""]
    # One line per event; a long message (the final answer) is cut here.
    text = lines[0] + (" …" if len(lines) > 1 else "")
    tool_use_id = record.get("tool_use_id")
    if tool_use_id and str(tool_use_id) not in text:
        text += f"  [{str(tool_use_id)[-8:]}]"  # tells parallel delegations apart
    return text


def readable(agent: str, record: dict[str, Any], agent_width: int = 12, now: float | None = None) -> str | None:
    """One line for a person, or None when the record is not for people (see the module doc)."""
    kind = record.get("timeline")
    level = str(record.get("level") or "")
    if not isinstance(kind, str) and level not in PROBLEM_LEVELS:
        return None
    moment = time.time() if now is None else now
    clock = time.strftime("%H:%M:%S", time.localtime(moment)) + f".{int(moment * 1000) % 1000:03d}"
    session = str(record.get("session_id") or "")
    where = f"{session[:8]:<8}" if session else " " * 8
    if isinstance(kind, str):
        text = event_text(kind, record)
    else:
        detail = record.get("detail") or record.get("exception") or ""
        first = str(detail).strip().splitlines()[-1] if detail else ""
        text = f"{level}: {record.get('message', '')}" + (f" ({first})" if first else "")
    return f"{clock}  {agent:<{agent_width}}  {where}  {text}"


def routine_text(line: str) -> bool:
    """A non-JSON line a person does not need (the hosts' INFO start/stop lines)."""
    return bool(_ROUTINE_TEXT.match(line))
