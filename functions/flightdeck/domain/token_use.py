"""The model's tokens a session used: per think (stored with its reply), summed per turn (one task) and per session.

A think's usage is its reply's (Converse's `usage`: inputTokens, outputTokens, cacheReadInputTokens,
cacheWriteInputTokens; the local model's are computed by flightdeck.domain.prompt_cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flightdeck.domain.records import Session, Stamp


@dataclass(frozen=True)
class TokenUse:
    input: int = 0  # billed at the input price: neither read from nor written to the cache
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    thinks: int = 0

    @classmethod
    def of(cls, stamp: Stamp) -> TokenUse:
        return cls(stamp.tokens_in, stamp.tokens_out, stamp.cache_read, stamp.cache_write, 1)

    @classmethod
    def of_usage(cls, usage: dict[str, Any]) -> TokenUse:
        """A stored reply's Converse usage (its think not counted: a Stamp's tokens)."""

        def tokens(key: str) -> int:
            return int(usage.get(key, 0))

        return cls(
            tokens("inputTokens"),
            tokens("outputTokens"),
            tokens("cacheReadInputTokens"),
            tokens("cacheWriteInputTokens"),
        )

    def __add__(self, other: TokenUse) -> TokenUse:
        return TokenUse(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            self.thinks + other.thinks,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "thinks": self.thinks,
        }


def by_turn(session: Session) -> list[tuple[int, TokenUse]]:
    """(turn, its thinks' tokens) for each turn the session took, in order: a turn starts at a user message that
    is not tool results."""
    turns: list[tuple[int, TokenUse]] = []
    for index, message in enumerate(session.messages):
        blocks = message.get("content", [])
        if message.get("role") == "user" and not any("toolResult" in b for b in blocks):
            turns.append((len(turns) + 1, TokenUse()))
        elif message.get("role") == "assistant" and turns and index < len(session.stamps):
            turn, used = turns[-1]
            turns[-1] = (turn, used + TokenUse.of(session.stamps[index]))
    return turns


def total(session: Session) -> TokenUse:
    return sum((used for _, used in by_turn(session)), TokenUse())
