import base64
import hashlib
import hmac
import json

import pytest

from flightdeck.domain.tokens import MAX_TOKEN_LENGTH, CallbackClaims, SigningKey, TokenError, mint, verify

SECRET = b"k" * 40
NOW = 1_800_000_000
CLAIMS = CallbackClaims(
    session_id="s-1",
    turn=2,
    tool_use_id="tooluse_abc",
    tool_id="ask_worker",
    name="worker",
    total_tools=3,
    agent="orchestrator",
    iat=NOW,
    exp=NOW + 300,
)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_known_answer_vector_computed_with_stdlib_hmac():
    key = SigningKey(SECRET)
    payload = json.dumps({**CLAIMS.model_dump(), "kid": key.kid}, separators=(",", ":"), sort_keys=True).encode()
    expected = b64(payload) + "." + b64(hmac.new(SECRET, payload, hashlib.sha256).digest())
    assert mint(CLAIMS, key) == expected
    assert "=" not in expected


def test_verifies_any_payload_bytes_signed_with_the_secret():
    # The HMAC covers the transmitted bytes, whatever their key order or spacing.
    payload = json.dumps({**CLAIMS.model_dump()}, indent=1).encode()
    token = b64(payload) + "." + b64(hmac.new(SECRET, payload, hashlib.sha256).digest())
    assert verify(token, [SigningKey(SECRET)], agent="orchestrator", now=NOW).tool_use_id == "tooluse_abc"


def test_roundtrip():
    token = mint(CLAIMS, SigningKey(SECRET))
    assert verify(token, [SigningKey(SECRET)], agent="orchestrator", now=NOW + 10) == CLAIMS.model_copy(
        update={"kid": SigningKey(SECRET).kid}
    )


def _flip(text: str, i: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    c = text[i]
    return text[:i] + alphabet[(alphabet.index(c) + 1) % 64] + text[i + 1 :]


def test_tampering_with_any_character_is_refused():
    token = mint(CLAIMS, SigningKey(SECRET))
    for i, c in enumerate(token):
        if c == ".":
            continue
        with pytest.raises(TokenError):
            verify(_flip(token, i), [SigningKey(SECRET)], agent="orchestrator", now=NOW)


def test_tampering_with_any_payload_byte_is_refused():
    token = mint(CLAIMS, SigningKey(SECRET))
    payload_b64, sig = token.split(".")
    payload = base64.urlsafe_b64decode(payload_b64 + "==")
    for i in range(len(payload)):
        forged = bytearray(payload)
        forged[i] ^= 0x01
        with pytest.raises(TokenError):
            verify(b64(bytes(forged)) + "." + sig, [SigningKey(SECRET)], agent="orchestrator", now=NOW)


@pytest.mark.parametrize("now,reason", [(NOW + 300 + 31, "expired"), (NOW - 31, "issued in the future")])
def test_time_checks_allow_small_skew_only(now, reason):
    token = mint(CLAIMS, SigningKey(SECRET))
    with pytest.raises(TokenError) as exc:
        verify(token, [SigningKey(SECRET)], agent="orchestrator", now=now)
    assert exc.value.reason == reason
    verify(token, [SigningKey(SECRET)], agent="orchestrator", now=NOW + 300 + 29)  # within skew


def test_wrong_agent_is_refused():
    token = mint(CLAIMS, SigningKey(SECRET))
    with pytest.raises(TokenError) as exc:
        verify(token, [SigningKey(SECRET)], agent="worker", now=NOW)
    assert exc.value.reason == "token is for another agent"


def test_wrong_secret_is_refused():
    token = mint(CLAIMS, SigningKey(b"other" * 10))
    with pytest.raises(TokenError) as exc:
        verify(token, [SigningKey(SECRET)], agent="orchestrator", now=NOW)
    assert exc.value.reason == "bad signature"


def test_previous_secret_still_verifies_after_rotation():
    old, new = SigningKey(b"old-secret" * 4), SigningKey(b"new-secret" * 4)
    token = mint(CLAIMS, old)
    assert verify(token, [new, old], agent="orchestrator", now=NOW).kid == old.kid
    with pytest.raises(TokenError):
        verify(token, [new], agent="orchestrator", now=NOW)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "abc",
        "a.b.c",
        "!!!.###",
        "x" * (MAX_TOKEN_LENGTH + 1),
        b64(b"not json") + "." + b64(hmac.new(SECRET, b"not json", hashlib.sha256).digest()),
        b64(b'{"session_id":"s"}') + "." + b64(hmac.new(SECRET, b'{"session_id":"s"}', hashlib.sha256).digest()),
    ],
)
def test_malformed_and_oversized_tokens_are_refused(token):
    with pytest.raises(TokenError):
        verify(token, [SigningKey(SECRET)], agent="orchestrator", now=NOW)


def test_padded_base64_is_refused():
    token = mint(CLAIMS, SigningKey(SECRET))
    payload_b64, sig = token.split(".")
    with pytest.raises(TokenError):
        verify(payload_b64 + "=." + sig, [SigningKey(SECRET)], agent="orchestrator", now=NOW)
