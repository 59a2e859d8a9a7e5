"""Property tests for the callback token codec."""

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from flightdeck.domain.tokens import CallbackClaims, SigningKey, TokenError, b64url_decode, b64url_encode, mint, verify

ids = st.text(alphabet=string.ascii_letters + string.digits + "-_:.", min_size=1, max_size=64)
claims = st.builds(
    CallbackClaims,
    session_id=ids,
    turn=st.integers(1, 10**6),
    tool_use_id=ids,
    tool_id=ids,
    name=ids,
    total_tools=st.integers(1, 50),
    agent=st.sampled_from(["orchestrator", "a", "b-2"]),
    iat=st.integers(1_700_000_000, 1_900_000_000),
    exp=st.integers(1_700_000_000, 2_000_000_000),
)
secrets = st.binary(min_size=32, max_size=64)


@given(st.binary(min_size=1, max_size=300))
def test_base64url_roundtrips_unpadded(data):
    text = b64url_encode(data)
    assert "=" not in text and b64url_decode(text) == data


@settings(max_examples=200)
@given(claims, secrets, st.integers(1, 10**6))
def test_mint_then_verify_roundtrips(c, secret, lifetime):
    c = c.model_copy(update={"exp": c.iat + lifetime})
    key = SigningKey(secret)
    got = verify(mint(c, key), [key], agent=c.agent, now=c.iat)
    assert got.model_dump(exclude={"kid"}) == c.model_dump(exclude={"kid"}) and got.kid == key.kid


@settings(max_examples=200)
@given(claims, secrets, st.data())
def test_any_single_character_change_is_refused(c, secret, data):
    key = SigningKey(secret)
    token = mint(c.model_copy(update={"exp": c.iat + 600}), key)
    i = data.draw(st.integers(0, len(token) - 1))
    replacement = data.draw(st.sampled_from(string.ascii_letters + string.digits + "-_.=+/"))
    forged = token[:i] + replacement + token[i + 1 :]
    if forged == token:
        return
    try:
        verify(forged, [key], agent=c.agent, now=c.iat)
    except TokenError:
        return
    raise AssertionError(f"accepted a changed token at {i}")


@given(st.text(max_size=3000))
def test_arbitrary_text_never_crashes_and_never_verifies(text):
    try:
        verify(text, [SigningKey(b"k" * 32)], agent="orchestrator", now=1_800_000_000)
    except TokenError:
        return
    raise AssertionError("random text verified")
