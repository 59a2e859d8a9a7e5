"""Where a peer on the lean front door is reached (docs/FRONT_DOORS.md): its published value names its function
URLs beside its base URL, and each round-trip call goes to the one that serves it; nothing a caller says is used."""

from __future__ import annotations

import pytest

from flightdeck import topology
from flightdeck.adapters.peer_directory import DiscoveringAllowlist
from flightdeck.domain.allowlist import (
    CALLBACK_ENDPOINT,
    CHAT_ENDPOINT,
    ENDPOINTS,
    Allowlist,
    AllowlistError,
    UnknownServiceError,
)

API = "https://abc123.execute-api.us-east-1.amazonaws.com"
CHAT = "https://chat0000000000000000000000000000.lambda-url.us-east-1.on.aws"
CALLBACK = "https://back0000000000000000000000000000.lambda-url.us-east-1.on.aws"
A2A = "https://a2a00000000000000000000000000000.lambda-url.us-east-1.on.aws"
LEAN = f"{API} chat_ingest={CHAT}/ callback={CALLBACK} a2a={A2A}"


def test_the_endpoints_are_the_handlers_with_a_function_url():
    assert ENDPOINTS == topology.URL_HANDLERS


def test_a_lean_peer_s_round_trip_goes_to_its_function_urls_and_the_rest_to_its_base():
    allowlist = Allowlist.parse(f"worker:{LEAN},rest:https://rest.example/prod")
    assert allowlist.resolve("worker", CHAT_ENDPOINT) == CHAT
    assert allowlist.resolve("worker", CALLBACK_ENDPOINT) == CALLBACK
    assert allowlist.resolve("worker") == API  # the card, the user's routes: the HTTP API
    assert allowlist.resolve("rest", CHAT_ENDPOINT) == "https://rest.example/prod"  # the REST door: one base
    assert Allowlist.parse(allowlist.to_env()) == allowlist
    # An A2A card's JSON-RPC URL on the a2a function's URL is an allowed place; a stranger's is not.
    assert allowlist.allows_url(f"{A2A}/a2a") and not allowlist.allows_url("https://evil.lambda-url.on.aws/a2a")
    with pytest.raises(UnknownServiceError):
        allowlist.resolve("stranger", CHAT_ENDPOINT)


@pytest.mark.parametrize(
    "value, why",
    [
        (f"{API} chat={CHAT}", "not endpoint=url"),
        (f"{API} chat_ingest={CHAT} chat_ingest={CHAT}", "given twice"),
        (f"{API} callback=https://x.example/?q=1", "query"),
        (f"{API} callback", "not endpoint=url"),
        (f"{API} callback=ftp://x.example", "http(s)"),
    ],
)
def test_a_malformed_endpoint_is_refused_naming_it(value, why):
    with pytest.raises(AllowlistError, match=why.replace("(", r"\(").replace(")", r"\)")):
        Allowlist.parse(f"worker:{value}")


def test_a_discovered_lean_peer_is_read_once_for_all_its_urls():
    asked: list[str] = []

    def lookup(name: str) -> str | None:
        asked.append(name)
        return {"worker": LEAN, "rest": "https://rest.example/prod", "broken": f"{API} chat_ingest=ftp://x"}.get(name)

    allowlist = DiscoveringAllowlist(discovered=("worker", "rest", "broken", "later"), lookup=lookup)
    assert allowlist.resolve("worker", CHAT_ENDPOINT) == CHAT
    assert allowlist.resolve("worker", CALLBACK_ENDPOINT) == CALLBACK
    assert allowlist.resolve("worker") == API
    assert allowlist.resolve("rest", CALLBACK_ENDPOINT) == "https://rest.example/prod"
    assert allowlist.allows_url(f"{CALLBACK}/api/tools/response")
    for name in ("broken", "later"):  # an invalid value is no value (fail closed), as is none
        with pytest.raises(UnknownServiceError):
            allowlist.resolve(name, CHAT_ENDPOINT)
    assert set(asked) == {"worker", "rest", "broken", "later"}


def test_the_agent_s_own_function_urls_setting(monkeypatch):
    from flightdeck.settings import Settings, SettingsError

    base = {
        "AGENT_NAME": "a",
        "STATE_TABLE": "a-state",
        "TURN_WORKER_FUNCTION": "a-turn-worker",
        "TURNS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
        "DISPATCH_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
        "DELIVERY_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
        "TIMERS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
        "TOOL_CALLBACK_SECRET": "test-only-secret-0123456789abcdef0123456789",
    }
    for key, value in base.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PUBLIC_ENDPOINT_URLS", f"a2a={A2A} callback={CALLBACK}")
    settings = Settings.from_env()
    assert settings.public_endpoints == {"a2a": A2A, "callback": CALLBACK}
    assert settings.for_domain().public_endpoints["callback"] == CALLBACK
    monkeypatch.setenv("PUBLIC_ENDPOINT_URLS", "a2a=not-a-url")
    with pytest.raises(SettingsError, match="PUBLIC_ENDPOINT_URLS"):
        Settings.from_env()
