"""The local model's prompt cache entries in a SQLite file, shared by every process of a local stack.

Bedrock's cache is the account's: an agent's next think, in whichever execution environment it runs,
reads what its previous think wrote. A local stack runs each think in one of a pool of sandbox processes
(flightdeck.local.sandbox), so the entries live in one file the stack names (PROMPT_CACHE_FILE), not in
a process's memory.
"""

from __future__ import annotations

import os
import sqlite3

from flightdeck.domain.prompt_cache import CacheLedger, MemoryLedger

# Set by the local stack (flightdeck.local.stack): the file its agents' local models share.
PROMPT_CACHE_FILE = "FLIGHTDECK_LOCAL_PROMPT_CACHE"

_process_ledger = MemoryLedger()


class FileLedger:
    def __init__(self, path: str) -> None:
        # One connection for the process (a warm function's model is built once): a think opens no file.
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, expires_ms INTEGER NOT NULL)")

    def expiries(self, keys: list[str]) -> dict[str, int]:
        if not keys:
            return {}
        marks = ",".join("?" * len(keys))
        rows = self._db.execute(f"SELECT key, expires_ms FROM entries WHERE key IN ({marks})", keys).fetchall()  # noqa: S608 - placeholders only
        return {str(k): int(v) for k, v in rows}

    def keep(self, keys: list[str], expires_ms: int) -> None:
        self._db.executemany(
            "INSERT INTO entries (key, expires_ms) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET expires_ms = MAX(expires_ms, excluded.expires_ms)",
            [(k, expires_ms) for k in keys],
        )


def shared_ledger() -> CacheLedger:
    """The stack's file when it names one, else this process's memory."""
    path = os.environ.get(PROMPT_CACHE_FILE, "")
    return FileLedger(path) if path else _process_ledger
