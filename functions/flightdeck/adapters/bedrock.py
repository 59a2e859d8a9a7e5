"""Amazon Bedrock's Converse API behind the one model interface (flightdeck.domain.model)."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from flightdeck.domain.agent import ModelConfig
from flightdeck.domain.model import Message, ModelError, ModelReply, ToolSpec

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

    def request(self, *, system: str, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The Converse request for this call (exposed for tests and logging)."""
        request: dict[str, Any] = {
            "modelId": self.config.model_id,
            "messages": messages,
            "inferenceConfig": {"maxTokens": self.config.max_tokens, "temperature": self.config.temperature},
        }
        if system:  # Bedrock refuses an empty system text block
            request["system"] = [{"text": system}]
        if tools:
            request["toolConfig"] = {"tools": tools}
        return request

    def converse(self, *, system: str, messages: list[Message], tools: list[ToolSpec]) -> ModelReply:
        try:
            response = self.client.converse(**self.request(system=system, messages=messages, tools=tools))
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = error.get("Code", "Unknown")
            raise BedrockModelError(
                f"Bedrock converse failed for model {self.config.model_id!r}: {code}: {error.get('Message', exc)}",
                code=code,
                retryable=code in RETRYABLE_CODES,
            ) from exc
        except BotoCoreError as exc:  # timeouts, connection errors, invalid parameters
            raise BedrockModelError(
                f"Bedrock converse failed for model {self.config.model_id!r}: {type(exc).__name__}: {exc}",
                code=type(exc).__name__,
                retryable=not isinstance(exc, ParamValidationError),
            ) from exc
        return _reply(response, self.config.model_id)


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

