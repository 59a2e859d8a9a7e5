"""Request and response payloads of the HTTP API (pydantic, so the OpenAPI document is exact): what every
route shares (the one error shape, the Unicode check). Each channel's own payloads are in a module of their own
(chat_payloads, session_payloads, callback_payloads), so a function imports only its routes' models (cold start).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

from flightdeck.api.strict_json import is_unicode

SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
MAX_TOKEN_CHARS = 2048
NOT_UNICODE = "text is not valid Unicode (it holds a lone surrogate such as \\ud800)"


def _unicode(value: Any) -> Any:
    # JSON can escape half a surrogate pair ("\ud800"); such text can never be stored or sent as UTF-8.
    if isinstance(value, str) and not is_unicode(value):
        raise ValueError(NOT_UNICODE)
    return value


# Every string a client sends: refused with a 422 naming the field when it is not valid Unicode.
Text = Annotated[str, BeforeValidator(_unicode)]


# defer_build (Health, ErrorBody, ErrorResponse): built when first used (GET /health, the OpenAPI document), not
# when every HTTP function starts (cold start).
class Health(BaseModel):
    model_config = ConfigDict(defer_build=True)

    status: Literal["ok"]
    agent: str
    version: str


class ErrorBody(BaseModel):
    model_config = ConfigDict(defer_build=True)

    code: str
    message: str
    details: list[dict[str, Any]] | None = None


class ErrorResponse(BaseModel):
    model_config = ConfigDict(defer_build=True)

    error: ErrorBody
