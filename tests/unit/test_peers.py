"""Peer tokens: their shape, the constant-time check against a registry, and the deployment file's peers."""

from __future__ import annotations

import hashlib
import textwrap

import pytest

from flightdeck import config_file, config_models
from flightdeck.domain.peers import (
    ACTIVE,
    REVOKED,
    AuthStatus,
    PeerRecord,
    PeerTokenError,
    authenticate,
    bearer_token,
    check_token,
    new_token,
    peer_of,
    token_sha256,
    visible_to,
)


class Registry:
    def __init__(self, *records: PeerRecord):
        self.records = {r.peer_id: r for r in records}

    def get_peer(self, peer_id):
        return self.records.get(peer_id)


def test_a_new_token_names_its_peer_and_carries_32_random_bytes():
    token = new_token("orchestrator")
    prefix, peer, secret = token.split("_", 2)
    assert (prefix, peer) == ("fdp", "orchestrator") and len(secret) == 43 and "=" not in secret
    assert peer_of(token) == "orchestrator" and new_token("orchestrator") != token
    assert token_sha256(token) == hashlib.sha256(token.encode()).hexdigest()


@pytest.mark.parametrize(
    "token",
    [
        "",
        "fdp_",
        "fdp_orchestrator",
        "fdp_orchestrator_",
        "fdp_orchestrator_short",
        "abc_orchestrator_" + "a" * 43,
        "fdp_Orchestrator_" + "a" * 43,
        "fdp_orch estrator_" + "a" * 43,
        "fdp_orchestrator_" + "a" * 43 + "!",
        "fdp_" + "a" * 64 + "_" + "b" * 43,
        "fdp_orchestrator_" + "a" * 257,
    ],
)
def test_malformed_tokens_name_no_peer(token):
    assert peer_of(token) is None
    with pytest.raises(PeerTokenError):
        check_token(token)


def test_the_secret_may_hold_underscores_the_id_may_not():
    assert peer_of("fdp_my-agent_" + "a_b-" * 10) == "my-agent"
    with pytest.raises(PeerTokenError, match="names peer 'alice', not 'bob'"):
        check_token(new_token("alice"), "bob")
    with pytest.raises(PeerTokenError):
        new_token("with_underscore")


def test_bearer_header_parsing():
    assert bearer_token("Bearer abc") == "abc" and bearer_token("bearer  abc ") == "abc"
    assert bearer_token(None) is None and bearer_token("Basic abc") is None and bearer_token("Bearer a b") is None


def record(token: str, **kw) -> PeerRecord:
    return PeerRecord(peer_id=peer_of(token), token_sha256=token_sha256(token), status=ACTIVE, created_at=1, **kw)


def test_authenticate_outcomes():
    good = new_token("alice")
    registry = Registry(record(good))
    assert authenticate(registry, good, 0).status is AuthStatus.OK
    assert authenticate(registry, "nonsense", 0).status is AuthStatus.MALFORMED
    assert authenticate(registry, new_token("alice"), 0) == authenticate(registry, new_token("alice"), 0)
    assert authenticate(registry, new_token("alice"), 0).status is AuthStatus.UNKNOWN  # wrong secret
    assert authenticate(registry, new_token("bob"), 0).status is AuthStatus.UNKNOWN  # no such peer
    revoked = Registry(PeerRecord("alice", token_sha256(good), REVOKED, 1))
    assert authenticate(revoked, good, 0).status is AuthStatus.REVOKED


def test_the_previous_token_is_accepted_until_its_grace_deadline_only():
    old, new = new_token("alice"), new_token("alice")
    registry = Registry(record(new, previous_sha256=token_sha256(old), previous_valid_until=1_000))
    assert authenticate(registry, new, 5_000).ok
    result = authenticate(registry, old, 999)
    assert result.ok and result.via_previous
    assert authenticate(registry, old, 1_000).status is AuthStatus.UNKNOWN


def test_visibility():
    assert visible_to("alice", "alice") and not visible_to("alice", "bob") and not visible_to("", "bob")
    assert visible_to("alice", None)  # INBOUND_AUTH=off


def _load(tmp_path, text: str) -> config_models.DeploymentFile:
    path = tmp_path / "d.toml"
    path.write_text(textwrap.dedent(text))
    return config_file.load(path)


def test_the_file_gives_each_agent_its_token_for_the_agents_that_list_it(tmp_path):
    token = new_token("orchestrator")
    outside = new_token("orchestrator")
    deployment = _load(
        tmp_path,
        f"""
        [agents.orchestrator]
        allow = ["worker", "stranger"]
        allowed_hosts = {{ elsewhere = "https://elsewhere.example.com" }}
        peer_tokens = {{ elsewhere = "{outside}" }}
        [agents.worker]
        allow = ["orchestrator"]
        [agents.worker.peers]
        orchestrator = "{token}"
        [agents.stranger]
    """,
    )
    assert deployment.outbound_tokens("orchestrator") == {"worker": token, "elsewhere": outside}
    assert deployment.outbound_tokens("worker") == {}


@pytest.mark.parametrize(
    "table,problem",
    [
        ('[agents.worker.peers]\norchestrator = "fdp_someoneelse_' + "a" * 43 + '"', "names peer 'someoneelse'"),
        ('[agents.worker.peers]\norchestrator = "letmein"', "fdp_<peer_id>_<secret>"),
        ('[agents.worker.peers]\nBad_Id = "fdp_x_' + "a" * 43 + '"', "peer id"),
        ('[agents.worker]\npeer_tokens = { orchestrator = "letmein" }', "[agents.worker.peer_tokens].orchestrator"),
    ],
)
def test_malformed_peers_in_the_file_are_refused(tmp_path, table, problem):
    with pytest.raises(config_file.ConfigFileError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        _load(tmp_path, table)


def test_a_token_opens_only_the_channels_it_was_issued_for():
    from flightdeck.domain.peers import AuthStatus, PeerRecord, judge, proof_of, token_sha256

    token = new_token("claude")
    mcp_only = PeerRecord("claude", token_sha256(token), "active", 1, channels=("mcp",))
    legacy = PeerRecord("claude", token_sha256(token), "active", 1)  # stored before scopes: a2a alone
    assert judge(mcp_only, proof_of(token, 2, ("mcp",))).ok
    assert judge(mcp_only, proof_of(token, 2, ("a2a",))).status is AuthStatus.OUT_OF_SCOPE
    assert judge(legacy, proof_of(token, 2, ("a2a",))).ok
    assert judge(legacy, proof_of(token, 2, ("mcp",))).status is AuthStatus.OUT_OF_SCOPE
    assert judge(mcp_only, proof_of(token, 2)).ok  # the authorizer meters any channel
    # A wrong secret is unknown, never out of scope: a guess learns nothing of scopes.
    assert judge(mcp_only, proof_of(new_token("claude"), 2, ("a2a",))).status is AuthStatus.UNKNOWN
