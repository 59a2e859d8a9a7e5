"""A deterministic local model behind the Converse-shaped interface: no network.

Behaviour, as a pure function of (agent, system, messages, tools) (its usage also of the prompt cache's entries):

* New task (the last message is a user message with text):
  - ``@agent-name task`` mentions of agents this agent can delegate to (the
    delegating tool is among ``tools``) become toolUse blocks, one per mention,
    all in one assistant message (parallel delegations), stop_reason "tool_use".
    The task of a mention is the text up to the next marker or the end.
  - ``!tool args`` for a local tool of the agent (among ``tools``) becomes a
    toolUse of that tool with ``args`` as its single string argument.
  - ``!server__tool args`` for a tool of one of its MCP servers (among ``tools``): a toolUse of it whose
    input is ``args`` when they are a JSON object, else ``args`` as the first string its input schema
    requires (``!notes__search owls`` is ``{"query": "owls"}``).
  - Otherwise the agent answers the task itself (stop_reason "end_turn"):
    ``[name] Task: "<task>" — answer: <n> words; reversed: "<words reversed>"``.
  - Mentions of agents it cannot delegate to are not delegated; the answer
    says they are unknown.
  - Held to a JSON Schema (converse's output_schema), a final answer is an instance of that schema
    built from the task's text (flightdeck.domain.skills.instances); ``!prose`` in the task answers
    in prose instead (a reply that does not match, for the demo).
  - ``@agent:skill {json}`` calls that agent's skill through the tool its card gave (when offered);
    ``@agent task => {schema}`` delegates the task with a response_schema (JSON Schema or shorthand).
  - ``?ask question?`` (when there is nothing to delegate or run, and ask_user
    is among ``tools``): the agent asks the question (up to the first "?"; a
    stock question when none is given) with one ask_user call, and its turn ends
    (flightdeck.domain.asking). ``?answer text`` is not part of any task: it is
    the answer this agent gives a delegate that asks it a question.
* Results in (the last user message holds toolResult blocks): the final answer
  (end_turn) begins with a one-line summary ("2 of 2 delegations answered."),
  quotes every result's text verbatim naming the agent (or local tool) it came
  from, and says which failed and why. But:
  - results that answer its own question (the user's next message, given as the
    ask_user call's result): the task is answered with the answer, quoted; or,
    when the question passed on a delegate's question, the answer goes to that
    delegate, in its context (the delegating tool's context_id, task_id);
  - a delegate's question (an input_required result): answered with the task's
    ``?answer`` text by delegating it in the delegate's context (once per
    context); without one, passed on to whoever gave the task (ask_user:
    "<agent> asks: <question>").

Usage: tokens are estimated from the request (bytes / 4) and billed by Bedrock's prompt-caching rules as
the model_id (default model_prices.BILLED_AS) would be: cache reads, writes and input (flightdeck.domain.prompt_cache).

toolUse ids are ``tooluse_`` + 22 characters of a hash of the agent name, the
conversation so far and the block's index: the same input gives the same ids.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from flightdeck.domain import prompt_cache
from flightdeck.domain.agent import AgentDefinition, ModelConfig
from flightdeck.domain.asking import ASK_USER, asks, parse_input_required
from flightdeck.domain.builtin_tools import get_tool
from flightdeck.domain.model import Message, ModelReply, TextDelta, ToolSpec, word_chunks
from flightdeck.domain.model_prices import BILLED_AS
from flightdeck.domain.skills.contract import text_call
from flightdeck.domain.skills.instances import instance_of

# A marker starts at the beginning of the text or after whitespace / an opening bracket,
# so that e-mail addresses ("a@b.com") and exclamations ("wow!") are not markers.
_MARKER = re.compile(r"(?<![^\s(\[{\"'])([@!?])([a-z0-9][a-z0-9_-]*)")
ASK_MARKER, ANSWER_MARKER = "ask", "answer"  # ?ask, ?answer
# A task with this in it is answered in prose even when a schema is asked for: the demo's mismatch.
MISMATCH_MARKER = "!prose"
# `@agent:skill {json}` calls a peer skill's tool; `@agent task => {schema}` asks for a structured answer.
_SKILL_SUFFIX = re.compile(r":([a-z0-9][a-z0-9_-]*)")
_SCHEMA_ARROW = "=>"
STOCK_QUESTION = "Could you tell me more about what you need?"
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


class ScriptedModel:
    def __init__(
        self,
        config: ModelConfig,
        agent: AgentDefinition,
        sleep: Callable[[float], None] = time.sleep,
        ledger: prompt_cache.CacheLedger | None = None,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ):
        self.config = config
        self.agent = agent
        self._sleep = sleep
        # The prompt cache's entries: the account's, shared by every agent of a stack (a process's own by default).
        self._ledger = ledger if ledger is not None else prompt_cache.MemoryLedger()
        self._clock_ms = clock_ms

    # --- the interface ---------------------------------------------------------

    def converse(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        output_schema: dict[str, Any] | None = None,
    ) -> ModelReply:
        if self.config.think_delay_ms > 0:
            self._sleep(self.config.think_delay_ms / 1000)
        return self._reply(system, messages, tools, output_schema)

    def converse_stream(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        output_schema: dict[str, Any] | None = None,
    ) -> Iterator[TextDelta | ModelReply]:
        """The reply of converse, its text word by word first (flightdeck.domain.model.StreamingModel).

        The think delay is spread over the words (the same in all as converse's): each word comes
        after its share of it, so a stream of a slow think visibly progresses.
        """
        reply = self._reply(system, messages, tools, output_schema)
        pieces = [
            piece
            for block in reply.message.get("content", [])
            if isinstance(block.get("text"), str)
            for piece in word_chunks(block["text"])
            if piece
        ]
        delay_s = self.config.think_delay_ms / 1000
        if delay_s > 0 and not pieces:
            self._sleep(delay_s)
        for piece in pieces:
            if delay_s > 0:
                self._sleep(delay_s / len(pieces))
            yield TextDelta(piece)
        yield reply

    def _reply(
        self, system: str, messages: list[Message], tools: list[ToolSpec], output_schema: dict[str, Any] | None = None
    ) -> ModelReply:
        if not messages or messages[-1].get("role") != "user":
            raise ValueError("the conversation must end with a user message")
        last = messages[-1]
        if _has_tool_results(last):
            stop_reason, content = self._results_in(messages, tools)
        else:
            stop_reason, content = self._new_task(_text_of(last), messages, tools)
        if output_schema is not None and stop_reason == "end_turn" and MISMATCH_MARKER not in self._task_text(messages):
            # Held to a schema, it answers with an instance of it, built from the task's text (as a real
            # model forced through a tool whose input schema is the schema would); a structured call's
            # text is its arguments' text.
            task = _call_text(self._task_text(messages))
            content = [{"text": json.dumps(instance_of(output_schema, task), ensure_ascii=False)}]
        message = {"role": "assistant", "content": content}
        return ModelReply(stop_reason=stop_reason, message=message, usage=self._usage(system, messages, tools, message))

    def _usage(self, system: str, messages: list[Message], tools: list[ToolSpec], reply: Message) -> dict[str, int]:
        """What Bedrock would bill this request as the model it stands in for (flightdeck.domain.prompt_cache):
        computed from the request by the published rules, not measured."""
        rules = prompt_cache.rules_for(self.config.model_id or BILLED_AS) if self.config.prompt_cache else None
        request = prompt_cache.plan(system, tools, messages, rules)
        output = prompt_cache.estimate_tokens(reply)
        if rules is None:
            return prompt_cache.usage(request.total_tokens, output)
        return prompt_cache.bill(request, output, self._ledger, self._clock_ms(), rules.ttl_s)

    # --- parsing ---------------------------------------------------------------

    def _parse(self, text: str, tools: list[ToolSpec]) -> tuple[list[_Call], list[str]]:
        """The calls a task asks for, and the agents it mentions that this agent cannot reach."""
        available = {t.get("toolSpec", {}).get("name") for t in tools}
        markers = []  # (start, end, call-or-unknown)
        for m in _MARKER.finditer(text):
            sigil, name = m.group(1), m.group(2)
            if sigil == "@":
                delegate = self.agent.delegate_for_agent(name)
                skill = _SKILL_SUFFIX.match(text, m.end())
                if skill is not None and f"{name}__{skill.group(1)}" in available:
                    # `@agent:skill {json}`: a structured call through the tool the agent's card gave.
                    markers.append((m.start(), skill.end(), ("skill", f"{name}__{skill.group(1)}", name)))
                elif delegate is not None and delegate.name in available:
                    markers.append((m.start(), m.end(), ("delegate", delegate.name, name)))
                else:
                    markers.append((m.start(), m.end(), ("unknown", "", name)))
            elif sigil == "?":
                if name == ANSWER_MARKER:  # the answer for a delegate's question: no task's text
                    markers.append((m.start(), m.end(), ("answer", "", name)))
                # `?ask` stays in the text: it is the task's (or a delegate's task's) own
            elif name in self.agent.builtin_tools and name in available and get_tool(name) is not None:
                markers.append((m.start(), m.end(), ("local", name, name)))
            elif self.agent.mcp_server(name.partition("__")[0]) is not None and "__" in name:
                # A tool of one of its MCP servers: called when offered, else said to be unavailable (the server
                # is down, or does not list that tool), never answered as if it had been called.
                kind = "mcp" if name in available else "unknown"
                markers.append((m.start(), m.end(), (kind, name, "!" + name if kind == "unknown" else name)))
            # any other `!word` is ordinary text
        segments = []
        for i, (_, end, marker) in enumerate(markers):
            stop = markers[i + 1][0] if i + 1 < len(markers) else len(text)
            segments.append((marker, text[end:stop].strip().lstrip(":,;").strip()))
        lead = text[: markers[0][0]].strip() if markers else ""
        calls: list[_Call] = []
        unknown: list[str] = []
        for i, ((kind, tool, target), argument) in enumerate(segments):
            if kind == "answer":
                continue
            if kind == "unknown":
                if target not in unknown:
                    unknown.append(target)
                continue
            if kind == "delegate" and not argument:
                # "@a @b compare notes": a mention without a task shares the next task;
                # "summarise this @a": or takes the text before the first mention.
                following = (a for (k, _, _), a in segments[i + 1 :] if k not in ("local", "answer") and a)
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

    @staticmethod
    def _marker_text(text: str, name: str) -> str | None:
        """The text after the first ?name marker, up to the next marker (None without one)."""
        found = [m for m in _MARKER.finditer(text) if m.group(1) != "?" or m.group(2) in (ASK_MARKER, ANSWER_MARKER)]
        for i, m in enumerate(found):
            if m.group(1) == "?" and m.group(2) == name:
                stop = found[i + 1].start() if i + 1 < len(found) else len(text)
                return text[m.end() : stop].strip()
        return None

    def _question(self, text: str) -> tuple[str, str] | None:
        """(question, the task without it) when the text asks: `?ask which year? summarise`."""
        match = next((m for m in _MARKER.finditer(text) if m.group(1) == "?" and m.group(2) == ASK_MARKER), None)
        if match is None:
            return None
        after = self._marker_text(text, ASK_MARKER) or ""
        mark = after.find("?")
        question = after[: mark + 1].strip() if mark >= 0 else after
        rest = after[mark + 1 :] if mark >= 0 else ""
        task = " ".join(f"{text[: match.start()]} {rest}".split())
        return question or STOCK_QUESTION, task

    def _ask(self, messages: list[Message], questions: list[str], said: str) -> tuple[str, list[dict[str, Any]]]:
        content: list[dict[str, Any]] = [{"text": said}]
        for index, question in enumerate(questions):
            content.append(
                {
                    "toolUse": {
                        "toolUseId": self._tool_use_id(messages, index),
                        "name": ASK_USER,
                        "input": {"question": question},
                    }
                }
            )
        return "tool_use", content

    def _new_task(self, text: str, messages: list[Message], tools: list[ToolSpec]) -> tuple[str, list[dict[str, Any]]]:
        calls, unknown = self._parse(text, tools)
        asked = self._question(text) if not calls and _offers(tools, ASK_USER) else None
        if asked is not None:
            question, _task = asked
            return self._ask(messages, [question], f"Before I can do this, I need to know: {question}")
        if not calls:
            answer = self._answer(text)
            if unknown:
                answer += "\n" + self._unknown_line(unknown)
            return "end_turn", [{"text": answer}]

        delegations = [c for c in calls if c.kind in ("delegate", "skill")]
        local = [c for c in calls if c.kind in ("local", "mcp")]
        said = []
        if delegations:
            targets = ", ".join(dict.fromkeys(f"@{c.target}" for c in delegations))
            said.append(f"Delegating {len(delegations)} task(s) to {targets}.")
        if local:
            said.append(
                f"Running {len(local)} local tool call(s): {', '.join(dict.fromkeys('!' + c.target for c in local))}."
            )
        if unknown:
            said.append(self._unknown_line(unknown))
        content: list[dict[str, Any]] = [{"text": " ".join(said)}]
        for index, call in enumerate(calls):
            if call.kind == "skill":
                tool_input = _json_object(call.argument)
            elif call.kind == "mcp":
                tool_input = _mcp_input(call.argument, tools, call.tool)
            elif call.kind == "delegate":
                task, sep, schema = call.argument.partition(_SCHEMA_ARROW)
                tool_input = {"task": task.strip()}
                if sep and isinstance(_json_value(schema), (dict, str, list)):
                    tool_input["response_schema"] = _json_value(schema)
            else:
                tool_input = {get_tool(call.target).text_arg: call.argument}  # type: ignore[union-attr]
            content.append(
                {"toolUse": {"toolUseId": self._tool_use_id(messages, index), "name": call.tool, "input": tool_input}}
            )
        return "tool_use", content

    def _answer(self, task: str, asked: tuple[str, str] | None = None) -> str:
        task = task.strip()
        words = task.split()
        reversed_words = " ".join(reversed(words))
        told = f' (asked "{asked[0]}", told "{asked[1]}")' if asked else ""
        return f'[{self.agent.name}] Task: "{task}"{told} — answer: {len(words)} words; reversed: "{reversed_words}"'

    @staticmethod
    def _unknown_line(unknown: list[str]) -> str:
        """`unknown` holds agent names, and `!server__tool` for MCP tools that were not offered."""
        agents = [f"@{n}" for n in unknown if not n.startswith("!")]
        tools = [n for n in unknown if n.startswith("!")]
        lines = [f"Not delegated, unknown agent(s): {', '.join(agents)}."] if agents else []
        if tools:
            lines.append(
                f"Not called, not available: {', '.join(tools)} (its MCP server did not list it: the server is "
                "down, or it offers no such tool; the agent's log says which)."
            )
        return " ".join(lines)

    # --- results in ------------------------------------------------------------

    def _results_in(self, messages: list[Message], tools: list[ToolSpec]) -> tuple[str, list[dict[str, Any]]]:
        answered = asks(messages[-2]) if len(messages) >= 2 else []
        if answered:
            return self._answered(messages, answered)
        questions = self._delegate_questions(messages)
        if questions:
            reply = self._answer_delegates(messages, tools, questions)
            if reply is not None:
                return reply
        return "end_turn", [{"text": self._final_answer(messages, tools)}]

    def _delegate_questions(self, messages: list[Message], at: int = -1) -> list[tuple[str, dict[str, str]]]:
        """(delegating tool, its input_required fields) of each delegate's question in messages[at] (a results
        message, after the assistant message that called them)."""
        if len(messages) < 1 - at or messages[at - 1].get("role") != "assistant":
            return []
        called = {
            b["toolUse"].get("toolUseId"): b["toolUse"].get("name")
            for b in messages[at - 1].get("content", [])
            if "toolUse" in b
        }
        out = []
        for block in messages[at].get("content", []):
            result = block.get("toolResult")
            if not isinstance(result, dict) or result.get("status") == "error":
                continue
            tool = called.get(result.get("toolUseId"))
            fields = parse_input_required(_result_text(result))
            if fields is not None and tool and self.agent.delegate_for_tool(tool) is not None:
                out.append((tool, fields))
        return out

    def _task_text(self, messages: list[Message]) -> str:
        """The latest user text message: the task this turn works on."""
        for message in reversed(messages):
            if message.get("role") == "user" and not _has_tool_results(message):
                return _text_of(message)
        return ""

    def _continue(
        self, messages: list[Message], answers: list[tuple[str, dict[str, str], str]], said: str
    ) -> tuple[str, list[dict[str, Any]]]:
        """Delegate each answer in the context of the question it answers."""
        content: list[dict[str, Any]] = [{"text": said}]
        for index, (tool, fields, answer) in enumerate(answers):
            tool_input = {
                "task": answer,
                "context_id": fields["context_id"],
                **({"task_id": fields["task_id"]} if "task_id" in fields else {}),
            }
            content.append(
                {"toolUse": {"toolUseId": self._tool_use_id(messages, index), "name": tool, "input": tool_input}}
            )
        return "tool_use", content

    def _answer_delegates(
        self, messages: list[Message], tools: list[ToolSpec], questions: list[tuple[str, dict[str, str]]]
    ) -> tuple[str, list[dict[str, Any]]] | None:
        """A delegate asked: answer with the task's ?answer (once per context), else pass the question on."""
        answer = self._marker_text(self._task_text(messages), ANSWER_MARKER)
        continued = {
            str((b["toolUse"].get("input") or {}).get("context_id"))
            for m in messages
            for b in m.get("content", [])
            if "toolUse" in b
        }
        if answer and all(f["context_id"] not in continued for _, f in questions):
            return self._continue(
                messages,
                [(t, f, answer) for t, f in questions],
                f"Answering {len(questions)} question(s) of delegates: {answer}",
            )
        if _offers(tools, ASK_USER):
            asked = [f"{self._agent_of(t)} asks: {f['question']}" for t, f in questions]
            return self._ask(messages, asked, "A delegate needs an answer first.")
        return None

    def _agent_of(self, tool: str) -> str:
        delegate = self.agent.delegate_for_tool(tool)
        return delegate.agent if delegate is not None else tool

    def _answered(self, messages: list[Message], ask_ids: list[str]) -> tuple[str, list[dict[str, Any]]]:
        """The last message answers this agent's question (flightdeck.domain.asking: the answer is the result
        of its ask_user calls)."""
        results = {
            b["toolResult"].get("toolUseId"): _result_text(b["toolResult"])
            for b in messages[-1].get("content", [])
            if "toolResult" in b
        }
        answer = next((results[i] for i in ask_ids if i in results), "")
        # The question passed on the questions of delegates: the answer goes to them.
        relayed = self._delegate_questions(messages, at=-3) if len(messages) >= 4 else []
        if relayed:
            return self._continue(
                messages,
                [(t, f, answer) for t, f in relayed],
                f"Passing the answer on to {len(relayed)} delegate(s): {answer}",
            )
        asking = messages[-2]
        questions = "\n".join(
            str((b["toolUse"].get("input") or {}).get("question", ""))
            for b in asking.get("content", [])
            if "toolUse" in b
        )
        text = self._task_text(messages[:-2])
        own = self._question(text)
        task = own[1] if own is not None else text
        return "end_turn", [{"text": self._answer(task, (questions, answer))}]

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
        delegated = answered = local_total = local_ok = mcp_total = mcp_ok = 0
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
                task = _preview(str(tool_input.get("task") or json.dumps(tool_input, ensure_ascii=False)))
                question = None if failed else parse_input_required(text)
                if failed:
                    lines.append(f'- @{delegate.agent} via {tool} ("{task}") failed: {_failure_reason(text)}')
                elif question is not None:
                    lines.append(f'- @{delegate.agent} via {tool} ("{task}") asks: {question["question"]}')
                else:
                    answered += 1
                    lines.append(f'- @{delegate.agent} via {tool} ("{task}") answered:\n{text}')
            elif self.agent.mcp_server(tool.partition("__")[0]) is not None:
                mcp_total += 1
                label = f"!{tool} {json.dumps(tool_input, ensure_ascii=False, sort_keys=True)}"
                if failed:
                    lines.append(f"- {label} failed: {_failure_reason(text)}")
                else:
                    mcp_ok += 1
                    lines.append(f"- {label} → {text}")
            else:
                local_total += 1
                local_tool = get_tool(tool)
                argument = (
                    tool_input.get(local_tool.text_arg, "") if local_tool else json.dumps(tool_input, sort_keys=True)
                )
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
        if mcp_total:
            summary.append(f"{mcp_ok} of {mcp_total} MCP tool call{'s' if mcp_total != 1 else ''} succeeded.")
        if not summary:
            summary.append("No tool results.")
        head = " ".join(summary)
        out = [head, *lines]
        if unknown:
            out.append(self._unknown_line(unknown))
        return "\n".join(out)


def _mcp_input(argument: str, tools: list[ToolSpec], name: str) -> dict[str, Any]:
    """An MCP tool's input from `!server__tool args`: a JSON object as it is, else the text as the first string
    property its input schema requires (or lists)."""
    value = _json_value(argument)
    if isinstance(value, dict):
        return value
    spec: dict[str, Any] = next((t.get("toolSpec", {}) for t in tools if t.get("toolSpec", {}).get("name") == name), {})
    schema = (spec.get("inputSchema") or {}).get("json") or {}
    properties = schema.get("properties") or {}
    strings = [k for k, v in properties.items() if isinstance(v, dict) and v.get("type") == "string"]
    required = [k for k in schema.get("required") or [] if k in strings]
    key = (required or strings or ["input"])[0]
    return {key: argument}


def _call_text(text: str) -> str:
    """The words of a task: a structured call's (skill:<id> {json}) are its arguments' string values."""
    try:
        call = text_call(text)
    except ValueError:
        return text
    if call is None:
        return text
    return " ".join(v for v in call.arguments.values() if isinstance(v, str)) or text


def _json_value(text: str) -> Any:
    try:
        return json.loads(text.strip())
    except ValueError:
        return None


def _json_object(text: str) -> dict[str, Any]:
    value = _json_value(text)
    return value if isinstance(value, dict) else {}


def _offers(tools: list[ToolSpec], name: str) -> bool:
    return any(t.get("toolSpec", {}).get("name") == name for t in tools)
