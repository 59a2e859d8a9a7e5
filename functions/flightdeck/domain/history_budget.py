"""A per-agent history budget (model.history_budget_tokens): a think's input kept under N tokens by leaving out
the oldest turns, with a note to the model that they were.

A turn is a user message that is not tool results and everything up to the next one: whole turns go, so no
tool call is left without its result (Converse refuses that). The turn under way always stays, whatever its
size. Tokens are estimated as prompt_cache estimates them (bytes / 4).
"""

from __future__ import annotations

from typing import Any

from flightdeck.domain.prompt_cache import estimate_tokens

Message = dict[str, Any]


def elision_note(turns: int) -> str:
    return (
        f"[{turns} earlier turn(s) of this conversation were left out to keep within the history budget; "
        "answer from what follows.]"
    )


def within_budget(system: str, tools: list[dict[str, Any]], messages: list[Message], budget: int) -> list[Message]:
    """messages, its oldest turns left out while the request (system, tools, messages) is over budget tokens
    (0: no budget); the first message kept then begins with the note."""
    if budget <= 0:
        return messages
    starts = [i for i, m in enumerate(messages) if _starts_turn(m)]
    fixed = estimate_tokens(system) + sum(estimate_tokens(t) for t in tools)
    sizes = [estimate_tokens(m) for m in messages]

    def size(kept_from: int, dropped: int) -> int:
        return fixed + sum(sizes[kept_from:]) + (estimate_tokens(elision_note(dropped)) if dropped else 0)

    kept_from, dropped = 0, 0
    for turn, start in enumerate(starts[1:], start=1):
        if size(kept_from, dropped) <= budget:
            break
        kept_from, dropped = start, turn
    if not dropped:
        return messages
    first = messages[kept_from]
    noted = {**first, "content": [{"text": elision_note(dropped)}, *first.get("content", [])]}
    return [noted, *messages[kept_from + 1 :]]


def _starts_turn(message: Message) -> bool:
    return message.get("role") == "user" and not any("toolResult" in b for b in message.get("content", []))
