"""What a user does with the deployed agents: let peers in (docs/DEPLOYMENT.md's steps), chat, read the answer."""

from __future__ import annotations

import contextlib
import io
import json

import boto3
import requests
from e2e_cloud import REGION, DeployedStack
from e2e_lambda import Runtime

ACCOUNT_STACK = "Flightdeck-ApiGatewayAccount"
TASK = "@worker list three owls @worker name two rivers"


def flightdeck(*argv: str) -> str:
    """`flightdeck ...` (the CLI docs/DEPLOYMENT.md uses), in this process; its stdout."""
    from flightdeck import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(argv))
    assert code == 0, f"flightdeck {' '.join(argv)} exited {code}"
    return out.getvalue().strip()


def plan_id(name: str) -> str:
    """A usage plan's id (the stack's PeerUsagePlanId output is empty on moto: e2e_cloud)."""
    (plan,) = [
        p for p in boto3.client("apigateway", region_name=REGION).get_usage_plans()["items"] if p["name"] == name
    ]
    return plan["id"]


def let_in(stacks: dict[str, DeployedStack]) -> str:
    """The worker accepts the orchestrator, whose token goes into its PeerTokensSecretArn secret; you may call
    the orchestrator. Returns your token."""
    worker_token = flightdeck(
        "peers", "add", "--agent", "worker", "orchestrator", "--usage-plan-id", plan_id("flightdeck-worker-peers")
    )
    boto3.client("secretsmanager", region_name=REGION).put_secret_value(
        SecretId=stacks["Flightdeck-orchestrator"].outputs["PeerTokensSecretArn"],
        SecretString=json.dumps({"worker": worker_token}),
    )
    return flightdeck(
        "peers", "add", "--agent", "orchestrator", "user", "--usage-plan-id", plan_id("flightdeck-orchestrator-peers")
    )


class Chat:
    """curl, as docs/DEPLOYMENT.md has it: POST /api/chat, then GET /api/sessions/{id} until idle."""

    def __init__(self, runtime: Runtime, api_url: str, token: str):
        self.runtime, self.api, self.headers = runtime, api_url, {"Authorization": f"Bearer {token}"}

    def send(self, content: str) -> str:
        answer = requests.post(f"{self.api}api/chat", json={"content": content}, headers=self.headers, timeout=10)
        assert answer.status_code == 202, (answer.status_code, answer.text, self.runtime.failures)
        return answer.json()["session_id"]

    def session(self, session_id: str) -> dict:
        answer = requests.get(f"{self.api}api/sessions/{session_id}", headers=self.headers, timeout=10)
        assert answer.status_code == 200, (answer.status_code, answer.text)
        return answer.json()

    def answer(self, session_id: str) -> str:
        self.runtime.run_until(lambda: self.session(session_id)["status"] == "idle", what="the orchestrator's answer")
        last = self.session(session_id)["messages"][-1]
        return " ".join(block.get("text", "") for block in last["content"])
