"""A deterministic local model behind the Converse-shaped interface: no network.

Behaviour, as a pure function of (agent, system, messages, tools):

* New task (the last message is a user message with text):
  - ``@agent-name task`` mentions of agents this agent can delegate to (the
    delegating tool is among ``tools``) become toolUse blocks, one per mention,
    all in one assistant message (parallel delegations), stop_reason "tool_use".
    The task of a mention is the text up to the next marker or the end.
  - ``!tool args`` for a local tool of the agent (among ``tools``) becomes a
    toolUse of that tool with ``args`` as its single string argument.
  - Otherwise the agent answers the task itself (stop_reason "end_turn"):
    ``[name] Task: "<task>" — answer: <n> words; reversed: "<words reversed>"``.
  - Mentions of agents it cannot delegate to are not delegated; the answer
    says they are unknown.
* Results in (the last user message holds toolResult blocks): the final answer
  (end_turn) begins with a one-line summary ("2 of 2 delegations answered."),
  quotes every result's text verbatim naming the agent (or local tool) it came
  from, and says which failed and why.

toolUse ids are ``tooluse_`` + 22 characters of a hash of the agent name, the
conversation so far and the block's index: the same input gives the same ids.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from flightdeck.domain.agent import AgentDefinition, ModelConfig
from flightdeck.domain.local_tools import get_tool
from flightdeck.domain.model import Message, ModelReply, TextDelta, ToolSpec, word_chunks

# A marker starts at the beginning of the text or after whitespace / an opening bracket,
# so that e-mail addresses ("a@b.com") and exclamations ("wow!") are not markers.
_MARKER = re.compile(r"(?<![^\s(\[{\"'])([@!])([a-z0-9][a-z0-9_-]*)")
_TASK_PREVIEW_CHARS = 80


@dataclass(frozen=True)
class _Call:
    kind: str  # "delegate" | "local"
    tool: str  # tool name
    target: str  # agent name (delegate) or local tool name
    argument: str  # the task, or the local tool's text argument


def _preview(text: str, limit: int = _TASK_PREVIEW_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _text_of(message: Message) -> str:
    return "\n".join(b["text"] for b in message.get("content", []) if isinstance(b.get("text"), str))


def _has_tool_results(message: Message) -> bool:
    return any("toolResult" in b for b in message.get("content", []))


def _result_text(result: dict[str, Any]) -> str:
    parts = []
    for block in result.get("content", []) or []:
        if "text" in block:
            parts.append(str(block["text"]))
        elif "json" in block:
            parts.append(json.dumps(block["json"], sort_keys=True, ensure_ascii=False))
    return "\n".join(parts)


def _failure_reason(text: str) -> str:
    """'timeout' from '{"status":"error","reason":"timeout"}'; the text itself when not such JSON."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        data = None
    if isinstance(data, dict) and data.get("reason"):
        reason = str(data["reason"])
        detail = data.get("detail")
        return f"{reason} ({detail})" if detail else reason
    return " ".join(text.split()) or "no reason given"


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    return len(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).split())


class LocalModel:
    def __init__(self, config: ModelConfig, agent: AgentDefinition, sleep: Callable[[float], None] = time.sleep):
        self.config = config
        self.agent = agent
        self._sleep = sleep

    # --- the interface ---------------------------------------------------------

    def converse(self, *, system: str, messages: list[Message], tools: list[ToolSpec]) -> ModelReply:
        if self.config.think_delay_ms > 0:
            self._sleep(self.config.think_delay_ms / 1000)
        return self._reply(system, messages, tools)

    def converse_stream(self, *, system: str, messages: list[Message],
                        tools: list[ToolSpec]) -> Iterator[TextDelta | ModelReply]:
        """The reply of converse, its text word by word first (flightdeck.domain.model.StreamingModel).

        The think delay is spread over the words (the same in all as converse's): each word comes
        after its share of it, so a stream of a slow think visibly progresses.
        """
        reply = self._reply(system, messages, tools)
        pieces = [piece for block in reply.message.get("content", []) if isinstance(block.get("text"), str)
                  for piece in word_chunks(block["text"]) if piece]
        delay_s = self.config.think_delay_ms / 1000
        if delay_s > 0 and not pieces:
            self._sleep(delay_s)
        for piece in pieces:
            if delay_s > 0:
                self._sleep(delay_s / len(pieces))
            yield TextDelta(piece)
        yield reply

    def _reply(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> ModelReply:
        if not messages or messages[-1].get("role") != "user":
            raise ValueError("the conversation must end with a user message")
        last = messages[-1]
        if _has_tool_results(last):
            stop_reason, content = "end_turn", [{"text": self._final_answer(messages, tools)}]
        else:
            stop_reason, content = self._new_task(_text_of(last), messages, tools)
        message = {"role": "assistant", "content": content}
        usage_in = _words(system) + sum(_words(m.get("content", [])) for m in messages)
        usage_out = _words(content)
        return ModelReply(
            stop_reason=stop_reason,
            message=message,
            usage={"inputTokens": usage_in, "outputTokens": usage_out, "totalTokens": usage_in + usage_out},
        )

    # --- parsing ---------------------------------------------------------------

    def _parse(self, text: str, tools: list[ToolSpec]) -> tuple[list[_Call], list[str]]:
        """The calls a task asks for, and the agents it mentions that this agent cannot reach."""
        available = {t.get("toolSpec", {}).get("name") for t in tools}
        markers = []  # (start, end, call-or-unknown)
        for m in _MARKER.finditer(text):
            sigil, name = m.group(1), m.group(2)
            if sigil == "@":
                delegate = self.agent.delegate_for_agent(name)
                if delegate is not None and delegate.name in available:
                    markers.append((m.start(), m.end(), ("delegate", delegate.name, name)))
                else:
                    markers.append((m.start(), m.end(), ("unknown", "", name)))
            elif name in self.agent.local_tools and name in available and get_tool(name) is not None:
                markers.append((m.start(), m.end(), ("local", name, name)))
            # any other `!word` is ordinary text
        segments = []
        for i, (_, end, marker) in enumerate(markers):
            stop = markers[i + 1][0] if i + 1 < len(markers) else len(text)
            segments.append((marker, text[end:stop].strip().lstrip(":,;").strip()))
        lead = text[: markers[0][0]].strip() if markers else ""
        calls: list[_Call] = []
        unknown: list[str] = []
        for i, ((kind, tool, target), argument) in enumerate(segments):
            if kind == "unknown":
                if target not in unknown:
                    unknown.append(target)
                continue
            if kind == "delegate" and not argument:
                # "@a @b compare notes": a mention without a task shares the next task;
                # "summarise this @a": or takes the text before the first mention.
                following = (a for (k, _, _), a in segments[i + 1 :] if k != "local" and a)
                argument = next(following, lead)
                if not argument:
                    continue  # nothing to ask: not delegated
            calls.append(_Call(kind, tool, target, argument))
        return calls, unknown

    def _tool_use_id(self, messages: list[Message], index: int) -> str:
        payload = json.dumps(
            [self.agent.name, messages, index], sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
        )
        digest = hashlib.sha256(payload.encode("utf-8")).digest()
        return "tooluse_" + base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")[:22]

    # --- a new task ------------------------------------------------------------

    def _new_task(self, text: str, messages: list[Message], tools: list[ToolSpec]) -> tuple[str, list[dict]]:
        calls, unknown = self._parse(text, tools)
        if not calls:
            answer = self._answer(text)
            if unknown:
                answer += "\n" + self._unknown_line(unknown)
            return "end_turn", [{"text": answer}]

        delegations = [c for c in calls if c.kind == "delegate"]
        local = [c for c in calls if c.kind == "local"]
        said = []
        if delegations:
            targets = ", ".join(dict.fromkeys(f"@{c.target}" for c in delegations))
            said.append(f"Delegating {len(delegations)} task(s) to {targets}.")
        if local:
            said.append(f"Running {len(local)} local tool call(s): {', '.join(dict.fromkeys('!' + c.target for c in local))}.")
        if unknown:
            said.append(self._unknown_line(unknown))
        content: list[dict] = [{"text": " ".join(said)}]
        for index, call in enumerate(calls):
            if call.kind == "delegate":
                tool_input = {"task": call.argument}
            else:
                tool_input = {get_tool(call.target).text_arg: call.argument}  # type: ignore[union-attr]
            content.append(
                {"toolUse": {"toolUseId": self._tool_use_id(messages, index), "name": call.tool, "input": tool_input}}
            )
        return "tool_use", content

    def _answer(self, task: str) -> str:
        task = task.strip()
        words = task.split()
        reversed_words = " ".join(reversed(words))
        return f'[{self.agent.name}] Task: "{task}" — answer: {len(words)} words; reversed: "{reversed_words}"'

    @staticmethod
    def _unknown_line(unknown: list[str]) -> str:
        names = ", ".join(f"@{n}" for n in unknown)
        return f"Not delegated, unknown agent(s): {names}."

    # --- results in ------------------------------------------------------------

    def _final_answer(self, messages: list[Message], tools: list[ToolSpec]) -> str:
        # What each toolUseId was: from the assistant message that asked for the tools.
        asked: dict[str, dict[str, Any]] = {}
        origin_index = len(messages) - 1
        if len(messages) >= 2 and messages[-2].get("role") == "assistant":
            for block in messages[-2].get("content", []):
                if "toolUse" in block:
                    asked[block["toolUse"].get("toolUseId", "")] = block["toolUse"]
            origin_index = len(messages) - 2
        # The task that started this turn: the latest user text message before it (for unknown mentions).
        unknown: list[str] = []
        for message in reversed(messages[:origin_index]):
            if message.get("role") == "user" and not _has_tool_results(message):
                _, unknown = self._parse(_text_of(message), tools)
                break

        lines: list[str] = []
        delegated = answered = local_total = local_ok = 0
        for block in messages[-1].get("content", []):
            if "toolResult" not in block:
                continue
            result = block["toolResult"]
            text = _result_text(result)
            failed = result.get("status") == "error"
            use = asked.get(result.get("toolUseId", ""), {})
            tool = use.get("name") or "unknown tool"
            tool_input = use.get("input") or {}
            delegate = self.agent.delegate_for_tool(tool)
            if delegate is not None:
                delegated += 1
                task = _preview(str(tool_input.get("task", "")))
                if failed:
                    lines.append(f'- @{delegate.agent} via {tool} ("{task}") failed: {_failure_reason(text)}')
                else:
                    answered += 1
                    lines.append(f'- @{delegate.agent} via {tool} ("{task}") answered:\n{text}')
            else:
                local_total += 1
                local_tool = get_tool(tool)
                argument = tool_input.get(local_tool.text_arg, "") if local_tool else json.dumps(tool_input, sort_keys=True)
                label = f'!{tool} ("{_preview(str(argument))}")'
                if failed:
                    lines.append(f"- {label} failed: {_failure_reason(text)}")
                else:
                    local_ok += 1
                    lines.append(f"- {label} → {text}")

        summary = []
        if delegated:
            summary.append(f"{answered} of {delegated} delegation{'s' if delegated != 1 else ''} answered.")
        if local_total:
            summary.append(f"{local_ok} of {local_total} local tool call{'s' if local_total != 1 else ''} succeeded.")
        if not summary:
            summary.append("No tool results.")
        head = " ".join(summary)
        out = [head, *lines]
        if unknown:
            out.append(self._unknown_line(unknown))
        return "\n".join(out)
