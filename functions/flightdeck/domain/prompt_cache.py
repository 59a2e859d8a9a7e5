"""Prompt caching by Bedrock's published rules: where a request's cache points go, and what a request is billed.

The rules (Amazon Bedrock User Guide, "Prompt caching for faster model inference", read 2026-12-04; the
minimums agree with Anthropic's prompt-caching page): a cache point ends a prefix of the request, in the
order tools, system, messages; a point is only made when the whole prefix it ends reaches the model's
minimum (below it the point is ignored, not refused); at most 4 points a request; an entry lives 5 minutes
from its last use. A request whose prefix up to one of its points, or up to a block boundary shortly before
one (Claude looks back about 20), matches a live entry reads that prefix from the cache (billed a tenth of
the input price), writes what lies between that and its last point (1.25x), and pays the input price for
the rest. (Tool specs are billed once, as one block: the rules name no boundary inside them.)

Tokens here are estimated, by one method everywhere: the compact JSON of each piece of the request (the
system prompt, each tool spec, each message) in UTF-8 bytes, divided by 4, rounded up. Bedrock counts with
the model's own tokenizer; the local model (flightdeck.domain.scripted_model) bills by this estimate, so
what it reports is computed from the requests by the published rules, not measured on Bedrock.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

BYTES_PER_TOKEN = 4
CACHE_POINT: dict[str, Any] = {"cachePoint": {"type": "default"}}


@dataclass(frozen=True)
class CacheRules:
    """What one model allows: the tokens a point needs since the previous one, how many points, for how long."""

    min_tokens: int
    max_points: int = 4
    ttl_s: int = 300
    tools: bool = True  # a point may follow the tool specs (Amazon Nova: system and messages only)


# Model id pattern -> its rules (searched in the id: a cross-region profile "us.", "global." or an ARN matches).
CAPABILITIES: tuple[tuple[re.Pattern[str], CacheRules], ...] = tuple(
    (re.compile(pattern), rules)
    for pattern, rules in (
        (r"anthropic\.claude-3-7-sonnet", CacheRules(1024)),
        (r"anthropic\.claude-3-5-haiku", CacheRules(2048)),
        (r"anthropic\.claude-(sonnet-4-5|sonnet-4-|opus-4-1|opus-4-)(?!5|6)", CacheRules(1024)),
        (r"anthropic\.claude-(haiku-4-5|opus-4-5|opus-4-6)", CacheRules(4096)),
        (r"amazon\.nova-(micro|lite|pro|premier)", CacheRules(1000, tools=False)),
    )
)


def rules_for(model_id: str) -> CacheRules | None:
    """The model's caching rules, or None: it takes no cache points."""
    return next((rules for pattern, rules in CAPABILITIES if pattern.search(model_id)), None)


def estimate_tokens(piece: Any) -> int:
    """A piece's tokens: its compact JSON's UTF-8 bytes / 4, rounded up (a text is its own bytes)."""
    return -(-len(_compact(piece)) // BYTES_PER_TOKEN)


def _compact(piece: Any) -> bytes:
    text = (
        piece
        if isinstance(piece, str)
        else json.dumps(piece, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    )
    return text.encode("utf-8")


@dataclass(frozen=True)
class Point:
    """A place in a request a cache entry may end at: after the tool specs, the system prompt, or message
    `index`; `tokens` of the prefix it ends, `key` its hash (two requests share an entry when they share it)."""

    after: str  # "tools" | "system" | "message"
    tokens: int
    key: str
    index: int = -1


@dataclass(frozen=True)
class Plan:
    total_tokens: int
    points: tuple[Point, ...]  # the cache points the request carries
    boundaries: tuple[Point, ...] = ()  # every place an entry may end, in order (what a point looks back over)

    def at(self, after: str) -> bool:
        return any(p.after == after for p in self.points)

    def message_points(self) -> set[int]:
        return {p.index for p in self.points if p.after == "message"}


def plan(system: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]], rules: CacheRules | None) -> Plan:
    """The cache points of a request: after the tool specs, after the system prompt, after the last message the
    previous think sent (the stable prefix this think re-reads) and after the last message (what the next think
    re-reads); each only where the model allows it and its prefix reaches the model's minimum."""
    groups: list[tuple[str, int, list[Any]]] = [("tools", -1, list(tools))] if tools else []
    if system:
        groups.append(("system", -1, [system]))
    groups += [("message", i, [m]) for i, m in enumerate(messages)]
    wanted = {_previous_think_end(messages), len(messages) - 1}
    digest, total = hashlib.sha256(), 0
    points: list[Point] = []
    boundaries: list[Point] = []
    for after, index, pieces in groups:
        # One encoding a piece, for its tokens and the prefix's hash (sorted keys do not change its length).
        encoded = [_compact(p) for p in pieces]
        total += sum(-(-len(e) // BYTES_PER_TOKEN) for e in encoded)
        digest.update(after.encode("utf-8") + b"\x00" + b"\x00".join(encoded) + b"\x01")
        boundaries.append(Point(after, total, digest.hexdigest(), index))
        if rules is None or (after == "tools" and not rules.tools) or (after == "message" and index not in wanted):
            continue
        if total >= rules.min_tokens and len(points) < rules.max_points:
            points.append(boundaries[-1])
    return Plan(total, tuple(points), tuple(boundaries))


def _previous_think_end(messages: list[dict[str, Any]]) -> int:
    """The index of the last message the previous think was sent: the one before the latest reply (-2: none)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i - 1 if i > 0 else -2
    return -2


class CacheLedger(Protocol):
    """The cache's entries, by prefix key: when each expires (epoch ms). Shared by every caller of one account."""

    def expiries(self, keys: list[str]) -> dict[str, int]: ...

    def keep(self, keys: list[str], expires_ms: int) -> None: ...


class MemoryLedger:
    """A ledger in this process's memory (one process: a test, a bench step)."""

    def __init__(self) -> None:
        self.entries: dict[str, int] = {}

    def expiries(self, keys: list[str]) -> dict[str, int]:
        return {k: self.entries[k] for k in keys if k in self.entries}

    def keep(self, keys: list[str], expires_ms: int) -> None:
        self.entries.update(dict.fromkeys(keys, expires_ms))


# How far back from a cache point a match is looked for (Claude on Bedrock: about 20 block boundaries).
LOOKBACK = 20


def bill(request: Plan, output_tokens: int, ledger: CacheLedger, now_ms: int, ttl_s: int) -> dict[str, int]:
    """Converse's usage for a request by the rules: the longest live prefix ending at a point, or up to LOOKBACK
    boundaries before one, is read; what lies between it and the last point is written; the rest is input.
    Every point's entry (and the one read) then lives ttl_s more."""
    position = {b.key: i for i, b in enumerate(request.boundaries)}
    looked = {
        b.key: b
        for p in request.points
        for b in request.boundaries[max(0, position.get(p.key, 0) - LOOKBACK) : position.get(p.key, -1) + 1]
    }
    expiries = ledger.expiries(list(looked))
    live = [b for b in looked.values() if expiries.get(b.key, 0) > now_ms]
    hit = max(live, key=lambda b: b.tokens, default=None)
    read = hit.tokens if hit is not None else 0
    last = request.points[-1].tokens if request.points else 0
    write = max(0, last - read)
    kept = [p.key for p in request.points] + ([hit.key] if hit is not None else [])
    if kept:
        ledger.keep(kept, now_ms + ttl_s * 1000)
    return usage(request.total_tokens - read - write, output_tokens, read, write)


def usage(input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0) -> dict[str, int]:
    """A Converse usage: inputTokens are those neither read from nor written to the cache."""
    out = {"inputTokens": input_tokens, "outputTokens": output_tokens}
    out["totalTokens"] = input_tokens + output_tokens + cache_read + cache_write
    if cache_read or cache_write:
        out.update(cacheReadInputTokens=cache_read, cacheWriteInputTokens=cache_write)
    return out
