"""Amazon Bedrock's Converse API behind the one model interface (flightdeck.domain.model).

`converse` is one Converse call. `converse_stream` is one ConverseStream call: it yields the
reply's text as Bedrock sends it (TextDelta), then the reply assembled from the stream, the
same ModelReply converse gives (text, toolUse blocks with their JSON input, reasoning).

With prompt caching on (the agent's model.prompt_cache) and a model that takes cache points (the
capability table: flightdeck.domain.prompt_cache.CAPABILITIES), the request carries cachePoint blocks
after the tool specs, the system prompt, the last message the previous think sent and the last message,
where each prefix reaches the model's minimum; the reply's usage then has cacheReadInputTokens and
cacheWriteInputTokens beside inputTokens and outputTokens.

Given an output_schema (the turn has a contract), the answer is forced through a tool: `respond`
(RESPOND_TOOL), whose input schema is the output schema (wrapped in an object under "value" when it is
not one: Bedrock's tool inputs are objects), and toolChoice makes the model call a tool: any tool when
it has others (it may still delegate first), else `respond`. A reply that calls `respond` is the final
answer: end_turn, its text the JSON of the tool's input.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from flightdeck.domain import prompt_cache
from flightdeck.domain.agent import ModelConfig
from flightdeck.domain.model import RESPOND_TOOL, Message, ModelError, ModelReply, TextDelta, ToolSpec
from flightdeck.domain.prompt_cache import CACHE_POINT

__all__ = ["BedrockModel", "BedrockModelError", "ModelError", "RETRYABLE_CODES"]

# Error codes worth another try later (botocore's standard mode has already retried them).
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "InternalServerException",
        "ModelTimeoutException",
        "ModelNotReadyException",
    }
)

# Stop reasons outside ModelReply's vocabulary that still mean "the output was cut short".
_TRUNCATED = frozenset({"model_context_window_exceeded"})
_KNOWN_STOP_REASONS = frozenset(
    {"end_turn", "tool_use", "max_tokens", "stop_sequence", "guardrail_intervened", "content_filtered"}
)


class BedrockModelError(ModelError):
    """Bedrock could not answer; ``code`` is the service's error code when there is one."""

    def __init__(self, message: str, *, code: str = "", retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class BedrockModel:
    def __init__(
        self,
        config: ModelConfig,
        client: Any = None,
        *,
        region_name: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 120.0,
        max_attempts: int = 3,
    ):
        if not config.model_id:
            raise ValueError("model.model_id is required for provider 'bedrock' (a model id or inference profile)")
        self.config = config
        self._client = client
        self._region_name = region_name
        self._botocore_config = Config(
            retries={"mode": "standard", "max_attempts": max_attempts},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = boto3.client("bedrock-runtime", region_name=self._region_name, config=self._botocore_config)
        return self._client

    def request(
        self, *, system: str, messages: list[Message], tools: list[ToolSpec], output_schema: Any = None
    ) -> dict[str, Any]:
        """The Converse request for this call (exposed for tests and logging)."""
        offered = [*tools, _respond_spec(output_schema)] if output_schema is not None else list(tools)
        rules = prompt_cache.rules_for(self.config.model_id) if self.config.prompt_cache else None
        # A model without cache points costs no planning (the plan encodes the whole request).
        points = prompt_cache.plan(system, offered, messages, rules) if rules else prompt_cache.Plan(0, ())
        request: dict[str, Any] = {
            "modelId": self.config.model_id,
            "messages": [_with_point(m) if i in points.message_points() else m for i, m in enumerate(messages)],
            "inferenceConfig": {"maxTokens": self.config.max_tokens, "temperature": self.config.temperature},
        }
        if system:  # Bedrock refuses an empty system text block
            request["system"] = [{"text": system}, *([CACHE_POINT] if points.at("system") else [])]
        if offered:
            request["toolConfig"] = {"tools": [*offered, *([CACHE_POINT] if points.at("tools") else [])]}
        if output_schema is not None:
            # Forced: with other tools, any tool (delegating first stays possible); alone, respond itself.
            request["toolConfig"]["toolChoice"] = {"any": {}} if tools else {"tool": {"name": RESPOND_TOOL}}
        return request

    def converse(
        self, *, system: str, messages: list[Message], tools: list[ToolSpec], output_schema: Any = None
    ) -> ModelReply:
        request = self.request(system=system, messages=messages, tools=tools, output_schema=output_schema)
        try:
            response = self.client.converse(**request)
        except (ClientError, BotoCoreError) as exc:
            raise self._error("converse", exc) from exc
        return _answered(_reply(response, self.config.model_id), output_schema)

    def converse_stream(
        self, *, system: str, messages: list[Message], tools: list[ToolSpec], output_schema: Any = None
    ) -> Iterator[TextDelta | ModelReply]:
        """ConverseStream: the text as it comes, then the whole reply (flightdeck.domain.model.StreamingModel).

        A failure before or during the stream (an exception event: throttling, a model stream
        error...) raises BedrockModelError, retryable as converse's are; nothing half-received
        is returned as a reply.
        """
        reply = _StreamedReply()
        request = self.request(system=system, messages=messages, tools=tools, output_schema=output_schema)
        try:
            response = self.client.converse_stream(**request)
            for event in response["stream"]:
                delta = reply.add(event)
                if delta:
                    yield TextDelta(delta)
        except (ClientError, BotoCoreError) as exc:
            raise self._error("converse_stream", exc) from exc
        yield _answered(_reply(reply.response(), self.config.model_id), output_schema)

    def _error(self, operation: str, exc: Exception) -> BedrockModelError:
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            # An exception event inside a stream names its member ("throttlingException"), a failed
            # call its shape ("ThrottlingException"): one spelling for both.
            code = str(error.get("Code", "Unknown"))
            code = code[:1].upper() + code[1:]
            return BedrockModelError(
                f"Bedrock {operation} failed for model {self.config.model_id!r}: {code}: {error.get('Message', exc)}",
                code=code,
                retryable=code in RETRYABLE_CODES or code == "ModelStreamErrorException",
            )
        # Timeouts, connection errors, invalid parameters.
        return BedrockModelError(
            f"Bedrock {operation} failed for model {self.config.model_id!r}: {type(exc).__name__}: {exc}",
            code=type(exc).__name__,
            retryable=not isinstance(exc, ParamValidationError),
        )


class _StreamedReply:
    """A ConverseStream's events put back together as a Converse response (output, stopReason, usage).

    Bedrock sends each content block as start (a tool's id and name), deltas (text, a tool
    input's JSON in pieces, reasoning text and its signature) and stop, by contentBlockIndex.
    """

    def __init__(self) -> None:
        self.role = "assistant"
        self.blocks: dict[int, dict[str, Any]] = {}
        self.stop_reason = ""
        self.usage: dict[str, Any] = {}

    def _block(self, index: int) -> dict[str, Any]:
        return self.blocks.setdefault(index, {"text": [], "tool": None, "input": [], "reasoning": [], "signature": ""})

    def add(self, event: dict[str, Any]) -> str:
        """Take one event; returns the text it adds ("" for any other event)."""
        if "messageStart" in event:
            self.role = event["messageStart"].get("role", "assistant")
        elif "contentBlockStart" in event:
            start = event["contentBlockStart"]
            tool = (start.get("start") or {}).get("toolUse")
            if tool:
                self._block(int(start.get("contentBlockIndex", 0)))["tool"] = tool
        elif "contentBlockDelta" in event:
            body = event["contentBlockDelta"]
            block = self._block(int(body.get("contentBlockIndex", 0)))
            delta = body.get("delta") or {}
            if isinstance(delta.get("text"), str):
                text: str = delta["text"]
                block["text"].append(text)
                return text
            if "toolUse" in delta:
                block["input"].append(str(delta["toolUse"].get("input", "")))
            reasoning = delta.get("reasoningContent") or {}
            if isinstance(reasoning.get("text"), str):
                block["reasoning"].append(reasoning["text"])
            if isinstance(reasoning.get("signature"), str):
                block["signature"] = reasoning["signature"]
        elif "messageStop" in event:
            self.stop_reason = event["messageStop"].get("stopReason", "")
        elif "metadata" in event:
            self.usage = event["metadata"].get("usage") or {}
        return ""

    def response(self) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block["tool"] is not None:
                raw = "".join(block["input"])
                try:
                    tool_input = json.loads(raw) if raw.strip() else {}
                except ValueError:
                    raise BedrockModelError(
                        "Bedrock converse_stream sent a tool input that is not JSON", code="BadToolInput"
                    ) from None
                content.append(
                    {
                        "toolUse": {
                            "toolUseId": block["tool"].get("toolUseId", ""),
                            "name": block["tool"].get("name", ""),
                            "input": tool_input,
                        }
                    }
                )
            elif block["reasoning"] or block["signature"]:
                text = {"text": "".join(block["reasoning"])}
                if block["signature"]:
                    text["signature"] = block["signature"]
                content.append({"reasoningContent": {"reasoningText": text}})
            else:
                content.append({"text": "".join(block["text"])})
        return {
            "output": {"message": {"role": self.role, "content": content}},
            "stopReason": self.stop_reason,
            "usage": self.usage,
        }


def _reply(response: dict[str, Any], model_id: str) -> ModelReply:
    message = (response.get("output") or {}).get("message")
    if not isinstance(message, dict):
        raise BedrockModelError(f"Bedrock converse for model {model_id!r} returned no message", code="NoMessage")
    stop_reason = response.get("stopReason", "")
    if stop_reason in _TRUNCATED:
        stop_reason = "max_tokens"
    if stop_reason not in _KNOWN_STOP_REASONS:
        raise BedrockModelError(
            f"Bedrock converse for model {model_id!r} stopped with {stop_reason!r}", code=f"stopReason:{stop_reason}"
        )
    usage = {k: v for k, v in (response.get("usage") or {}).items() if isinstance(v, int) and not isinstance(v, bool)}
    return ModelReply(
        stop_reason=stop_reason,
        message={"role": message.get("role", "assistant"), "content": message.get("content", [])},
        usage=usage,
    )


def _with_point(message: Message) -> Message:
    """The message with a cache point after its content: the prefix up to it is cached (flightdeck.domain.prompt_cache)."""
    return {**message, "content": [*message.get("content", []), CACHE_POINT]}


# The key a schema that is not an object's travels under in respond's input (tool inputs are objects).
_WRAPPED = "value"


def _is_object_schema(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "object"


def _respond_spec(output_schema: Any) -> ToolSpec:
    """The respond tool: its input is the answer. A schema that is not an object's is wrapped under
    "value"; its definitions move up with it, so its local $refs still resolve from the root."""
    if _is_object_schema(output_schema):
        schema = output_schema
    else:
        inner = dict(output_schema) if isinstance(output_schema, dict) else output_schema
        schema = {"type": "object", "properties": {_WRAPPED: inner}, "required": [_WRAPPED]}
        if isinstance(inner, dict):
            for key in ("$defs", "definitions"):
                if key in inner:
                    schema[key] = inner.pop(key)
    return {
        "toolSpec": {
            "name": RESPOND_TOOL,
            "description": "Give your final answer: call this once, when you have everything, with the answer "
            "as its input (it must match the schema). Do not answer in text.",
            "inputSchema": {"json": schema},
        }
    }


def _answered(reply: ModelReply, output_schema: Any) -> ModelReply:
    """A reply to a request with an output schema: one that calls respond is the final answer (its text the
    JSON of respond's input). Called with other tools, respond is dropped and the others run: the model
    answers again once their results are in, through respond."""
    if output_schema is None or reply.stop_reason != "tool_use":
        return reply  # a call cut off (max_tokens) stays one: the turn loop ends the turn with an error
    content = reply.message.get("content", [])
    responds = [b["toolUse"] for b in content if b.get("toolUse", {}).get("name") == RESPOND_TOOL]
    if not responds:
        return reply
    others = [b for b in content if "toolUse" in b and b["toolUse"].get("name") != RESPOND_TOOL]
    if others:
        kept = [b for b in content if b.get("toolUse", {}).get("name") != RESPOND_TOOL]
        return reply.model_copy(update={"message": {**reply.message, "content": kept}})
    answer = responds[-1].get("input")
    if not _is_object_schema(output_schema) and isinstance(answer, dict) and set(answer) == {_WRAPPED}:
        answer = answer[_WRAPPED]
    text = json.dumps(answer, ensure_ascii=False)
    # Only the answer: text beside the call ("Here it is:") would make the answer no JSON.
    return ModelReply(
        stop_reason="end_turn",
        message={"role": reply.message.get("role", "assistant"), "content": [{"text": text}]},
        usage=reply.usage,
    )
