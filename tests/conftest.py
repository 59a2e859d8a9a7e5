import os

import pytest

# Never reach for real AWS from tests.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "FlightdeckTest")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")


@pytest.fixture
def aws():
    from moto import mock_aws

    with mock_aws():
        yield


@pytest.fixture
def orchestrator(aws, monkeypatch):
    from tests.support.harness import make_agent

    agent = make_agent(monkeypatch)
    yield agent
    from flightdeck import wiring

    wiring.reset()
