import json

import pytest

from flightdeck.settings import Settings, SettingsError

BASE = {
    "AGENT_NAME": "orchestrator",
    "STATE_TABLE": "orchestrator-state",
    "TURN_WORKER_FUNCTION": "f",
    "TURNS_QUEUE_URL": "q1",
    "DISPATCH_QUEUE_URL": "q2",
    "DELIVERY_QUEUE_URL": "q3",
    "TIMERS_QUEUE_URL": "q4",
    "TOOL_CALLBACK_SECRET": "s" * 40,
}


def test_defaults_follow_the_design():
    s = Settings.from_env(BASE)
    assert (
        s.async_tool_timeout_ms,
        s.tool_agg_punctuate_interval_ms,
        s.tool_agg_tombstone_ttl_ms,
        s.reply_to_state_ttl_ms,
        s.reply_retry_max_ms,
    ) == (300000, 15000, 60000, 86400000, 120000)
    assert s.allowed_host_mapping.services == {}


@pytest.mark.parametrize(
    "override,variable",
    [
        ({"ALLOWED_HOST_MAPPING": "worker"}, "ALLOWED_HOST_MAPPING"),
        ({"ALLOWED_HOST_MAPPING": "worker:ftp://x"}, "ALLOWED_HOST_MAPPING"),
        ({"ASYNC_TOOL_TIMEOUT_MS": "-5"}, "ASYNC_TOOL_TIMEOUT_MS"),
        ({"REPLY_RETRY_MAX_MS": "soon"}, "REPLY_RETRY_MAX_MS"),
        ({"TOOL_CALLBACK_SECRET": ""}, "TOOL_CALLBACK_SECRET"),
        ({"TOOL_CALLBACK_SECRET": "short"}, "TOOL_CALLBACK_SECRET"),
        ({"AGENT_NAME": "Bad Name"}, "AGENT_NAME"),
        ({"STATE_TABLE": ""}, "STATE_TABLE"),
        ({"AGENT_CONFIG": "{not json"}, "AGENT_CONFIG"),
    ],
)
def test_a_malformed_value_names_the_variable(override, variable):
    with pytest.raises(SettingsError) as exc:
        Settings.from_env({**BASE, **override})
    assert variable in str(exc.value)


def test_missing_variable_is_named():
    env = dict(BASE)
    del env["TURNS_QUEUE_URL"]
    with pytest.raises(SettingsError, match="TURNS_QUEUE_URL"):
        Settings.from_env(env)


def test_secret_arn_replaces_the_secret():
    env = {
        **BASE,
        "TOOL_CALLBACK_SECRET": "",
        "TOOL_CALLBACK_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:1:secret:x",
    }
    assert Settings.from_env(env).tool_callback_secret_arn


# --- peer authentication settings ----------------------------------------------------------------

TOKEN = "fdp_orchestrator_" + "a" * 43


def test_inbound_auth_is_required_by_default_and_peer_tokens_empty():
    s = Settings.from_env(BASE)
    assert s.inbound_auth == "required" and s.peer_tokens == {} and s.peer_tokens_secret_arn == ""
    assert Settings.from_env({**BASE, "INBOUND_AUTH": "off"}).inbound_auth == "off"
    assert Settings.from_env({**BASE, "PEER_TOKENS": json.dumps({"worker": TOKEN})}).peer_tokens == {"worker": TOKEN}


@pytest.mark.parametrize(
    "override",
    [
        {"INBOUND_AUTH": "sometimes"},
        {"PEER_TOKENS": "{not json"},
        {"PEER_TOKENS": '["fdp_orchestrator_x"]'},
        {"PEER_TOKENS": '{"worker": 5}'},
        {"PEER_TOKENS": '{"worker": "plain-password-of-the-worker"}'},
        {"PEER_TOKENS": '{"worker": "fdp_orchestrator_tooshort"}'},
    ],
)
def test_a_malformed_auth_setting_names_the_variable_and_never_echoes_a_token(override):
    with pytest.raises(SettingsError) as exc:
        Settings.from_env({**BASE, **override})
    variable = next(iter(override))
    assert variable in str(exc.value)
    assert "plain-password" not in str(exc.value) and "tooshort" not in str(exc.value)


def test_a_delegates_timeout_in_agent_config_is_checked_and_defaults_to_the_agents():
    config = {"name": "orchestrator", "delegates": [{"agent": "worker", "timeout_ms": 0}]}
    with pytest.raises(SettingsError) as exc:
        Settings.from_env({**BASE, "AGENT_CONFIG": json.dumps(config)})
    assert "AGENT_CONFIG" in str(exc.value) and "timeout_ms" in str(exc.value)
    config["delegates"] = [{"agent": "worker", "timeout_ms": 5000}, {"agent": "critic"}]
    s = Settings.from_env({**BASE, "AGENT_CONFIG": json.dumps(config), "ASYNC_TOOL_TIMEOUT_MS": "60000"})
    assert [d.timeout_or(s.async_tool_timeout_ms) for d in s.agent.delegates] == [5000, 60000]
