"""Run-time peer discovery (flightdeck.adapters.peer_directory) against moto's SSM, through Powertools.

An allowed name listed in DISCOVERED_PEERS resolves to the URL its stack published under
PEER_URL_PARAMETER_PREFIX/<name>/api-url; a URL in ALLOWED_HOST_MAPPING wins; an agent not
deployed yet is refused like an unknown service until it is.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from flightdeck import topology
from flightdeck.adapters.peer_directory import DiscoveringAllowlist, PeerUrlParameters, with_discovered_peers
from flightdeck.domain.allowlist import UnknownServiceError
from flightdeck.settings import Settings, SettingsError

PREFIX = "/flightdeck/test-deployment"
BASE = {
    "AGENT_NAME": "orchestrator",
    "STATE_TABLE": "orchestrator-state",
    "TURN_WORKER_FUNCTION": "f",
    "TURNS_QUEUE_URL": "q1",
    "DISPATCH_QUEUE_URL": "q2",
    "DELIVERY_QUEUE_URL": "q3",
    "TIMERS_QUEUE_URL": "q4",
    "TOOL_CALLBACK_SECRET": "s" * 40,
    "PEER_URL_PARAMETER_PREFIX": PREFIX,
}
WORKER_URL = "https://abc123.execute-api.us-east-1.amazonaws.com/prod/"


@pytest.fixture
def ssm(aws):
    return boto3.client("ssm", region_name="us-east-1")


def publish(ssm, agent: str, url: str) -> None:
    ssm.put_parameter(Name=topology.peer_url_parameter(PREFIX, agent), Value=url, Type="String", Overwrite=True)


def settings(**env: str) -> Settings:
    return with_discovered_peers(Settings.from_env({**BASE, **env}))


def test_a_published_url_resolves(ssm) -> None:
    publish(ssm, "worker", WORKER_URL)
    allowlist = settings(DISCOVERED_PEERS="worker").allowed_host_mapping
    assert "worker" in allowlist
    assert allowlist.resolve("worker") == WORKER_URL.rstrip("/")
    assert allowlist.allows_url(WORKER_URL + "api/tools/response")
    assert not allowlist.allows_url("https://abc123.execute-api.us-east-1.amazonaws.com/other/x")


def test_a_configured_url_wins_and_ssm_is_not_asked(ssm) -> None:
    publish(ssm, "worker", WORKER_URL)
    s = settings(DISCOVERED_PEERS="worker", ALLOWED_HOST_MAPPING="worker:https://configured.example.com/base")
    assert not isinstance(s.allowed_host_mapping, DiscoveringAllowlist)  # nothing left to discover
    assert s.allowed_host_mapping.resolve("worker") == "https://configured.example.com/base"


def test_names_outside_the_allowlist_stay_refused(ssm) -> None:
    publish(ssm, "intruder", "https://evil.example.com/")
    allowlist = settings(DISCOVERED_PEERS="worker").allowed_host_mapping
    assert "intruder" not in allowlist
    with pytest.raises(UnknownServiceError):
        allowlist.resolve("intruder")
    assert not allowlist.allows_url("https://evil.example.com/x")


def test_an_agent_not_deployed_yet_is_refused_until_it_is(ssm) -> None:
    allowlist = settings(DISCOVERED_PEERS="worker").allowed_host_mapping
    with pytest.raises(UnknownServiceError, match="no published URL"):
        allowlist.resolve("worker")
    assert not allowlist.allows_url(WORKER_URL)
    publish(ssm, "worker", WORKER_URL)  # its stack is deployed now: no redeploy of ours
    assert allowlist.resolve("worker") == WORKER_URL.rstrip("/")


@pytest.mark.parametrize("value", ["ftp://abc.example.com/", "https://user:pw@abc.example.com/", "not a url"])
def test_a_published_value_that_is_no_base_url_is_refused(ssm, value: str) -> None:
    publish(ssm, "worker", value)
    with pytest.raises(UnknownServiceError):
        settings(DISCOVERED_PEERS="worker").allowed_host_mapping.resolve("worker")


def test_urls_are_cached(ssm) -> None:
    publish(ssm, "worker", WORKER_URL)
    lookup = PeerUrlParameters(PREFIX, max_age_s=300)
    allowlist = DiscoveringAllowlist(services={}, discovered=("worker",), lookup=lookup)
    assert allowlist.resolve("worker") == WORKER_URL.rstrip("/")
    ssm.delete_parameter(Name=lookup.parameter_name("worker"))
    assert allowlist.resolve("worker") == WORKER_URL.rstrip("/")  # from the cache, no SSM call


def test_other_ssm_errors_raise_instead_of_refusing(aws) -> None:
    from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError

    client = boto3.client("ssm", region_name="us-east-1")
    stubber = Stubber(client)  # moto grants everything: the refusal a missing permission gives, stubbed
    stubber.add_client_error("get_parameter", service_error_code="AccessDeniedException", http_status_code=400)
    with stubber, pytest.raises(GetParameterError, match="AccessDenied"):
        PeerUrlParameters(PREFIX, client=client)("worker")


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"DISCOVERED_PEERS": "worker", "PEER_URL_PARAMETER_PREFIX": ""}, "PEER_URL_PARAMETER_PREFIX"),
        ({"DISCOVERED_PEERS": "worker,bad name"}, "DISCOVERED_PEERS"),
        ({"DISCOVERED_PEERS": "worker,worker"}, "DISCOVERED_PEERS"),
        ({"PEER_URL_PARAMETER_PREFIX": "flightdeck/no-leading-slash"}, "PEER_URL_PARAMETER_PREFIX"),
    ],
)
def test_malformed_discovery_settings_name_the_variable(env: dict[str, str], problem: str) -> None:
    with pytest.raises(SettingsError, match=problem):
        Settings.from_env({**BASE, **env})


def test_without_discovered_peers_the_settings_are_untouched() -> None:
    s = Settings.from_env({**BASE, "ALLOWED_HOST_MAPPING": "worker:http://127.0.0.1:9"})
    assert with_discovered_peers(s) is s
