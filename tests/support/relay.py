"""One in-process agent's API on loopback HTTP, so two agents of one test talk over real HTTP.

Each request goes through the local API gateway (flightdeck.local.gateway: the proxy event
API Gateway would build) to the agent's handler, run as that agent (harness Agent.acting).
`lose_answers` makes the relay do what a gateway timeout does: the agent processes the
request, and its caller gets a 504 instead of the answer (POSTs only; a GET, an agent card read for
the skill tools, passes through uncounted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flightdeck.local.gateway import ApiGateway, GatewayServer, HttpResponse, error_response
from flightdeck.local.invocation import FunctionRegistry


@dataclass
class Exchange:
    path: str
    body: bytes
    status: int  # what the agent answered
    sent_status: int  # what the caller got
    answer: bytes = field(repr=False, default=b"")


class _AgentGateway(ApiGateway):
    def __init__(self, relay: AgentRelay):
        super().__init__(FunctionRegistry("relay"))
        self.relay = relay

    def handle(
        self,
        *,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        source_ip: str,
        local_port: int,
    ) -> HttpResponse:
        relay = self.relay
        if relay.agent is None:
            return error_response(503, "no_agent", "the relay has no agent yet")
        with relay.agent.acting():
            response = super().handle(
                method=method, target=target, headers=headers, body=body, source_ip=source_ip, local_port=local_port
            )
        if method != "POST":
            return response  # a read (an agent card): neither lost nor counted, the exchanges are the tasks'
        sent = response
        if relay.lose_answers > 0:
            relay.lose_answers -= 1
            sent = error_response(504, "gateway_timeout", "the answer was lost on the way back")
        relay.exchanges.append(Exchange(target, body, response.status, sent.status, response.body))
        return sent


class AgentRelay:
    def __init__(self, agent: Any = None, lose_answers: int = 0):
        self.agent = agent  # a tests.support.harness.Agent; may be set after the relay starts (its URL first)
        self.lose_answers = lose_answers
        self.exchanges: list[Exchange] = []
        self.server = GatewayServer(_AgentGateway(self), address=("127.0.0.1", 0))
        self.server.start_background()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
