"""Callback keys from Secrets Manager (moto): current and previous versions, and the cost of asking."""

import boto3

from flightdeck.adapters import secrets
from flightdeck.settings import Settings

BASE = {
    "AGENT_NAME": "orchestrator",
    "STATE_TABLE": "t-state",
    "TURN_WORKER_FUNCTION": "f",
    "TURNS_QUEUE_URL": "q",
    "DISPATCH_QUEUE_URL": "q",
    "DELIVERY_QUEUE_URL": "q",
    "TIMERS_QUEUE_URL": "q",
}


def _settings(arn):
    return Settings.from_env({**BASE, "TOOL_CALLBACK_SECRET_ARN": arn})


def test_keys_come_from_secrets_manager_and_an_unrotated_secret_is_asked_once(aws, monkeypatch):
    sm = boto3.client("secretsmanager", region_name="us-east-1")
    arn = sm.create_secret(Name="cb-once", SecretString="first-secret-0123456789abcdef0123456789")["ARN"]
    calls = []
    monkeypatch.setattr(secrets, "_no_previous_until", {})
    secrets._provider.cache_clear()
    keys = secrets.signing_keys(_settings(arn))
    assert [k.secret for k in keys] == [b"first-secret-0123456789abcdef0123456789"]
    client = secrets._provider("AWSPREVIOUS").client
    client.meta.events.register("before-call.secretsmanager.GetSecretValue", lambda **kw: calls.append(1))
    for _ in range(5):
        assert len(secrets.signing_keys(_settings(arn))) == 1
    assert calls == []  # "no previous version" is remembered, not asked per request


def test_after_a_rotation_current_and_previous_both_verify(aws, monkeypatch):
    sm = boto3.client("secretsmanager", region_name="us-east-1")
    arn = sm.create_secret(Name="cb-rotated", SecretString="old-secret-0123456789abcdef0123456789")["ARN"]
    sm.put_secret_value(SecretId=arn, SecretString="new-secret-0123456789abcdef0123456789")
    monkeypatch.setattr(secrets, "_no_previous_until", {})
    secrets._provider.cache_clear()
    keys = secrets.signing_keys(_settings(arn))
    assert [k.secret for k in keys] == [
        b"new-secret-0123456789abcdef0123456789",
        b"old-secret-0123456789abcdef0123456789",
    ]
