"""The stack grants secretsmanager:GetSecretValue on exactly the agent's MCP servers' credential secrets (issue
28), to exactly the functions that call them (the think and the dispatch worker's deferred calls), and nothing
of the kind to an agent without MCP servers. Reads the session's synthesized templates (tests/infra/conftest.py:
the planner has three MCP servers, two with a `secret:` credential)."""

from __future__ import annotations

from typing import Any

from flightdeck import topology
from tests.infra.template_queries import actions, referenced_ids, statement_resources, statements_of

ACCOUNT, REGION = "123456789012", "eu-west-1"
BY_NAME = "planner/notes-token"
BY_ARN = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:search-token-AbCdEf"
MCP_CALLERS = {"turn_worker", "dispatch_worker"}


def _resolved(value: Any) -> str:
    """An ARN as the template writes it (a string, or Fn::Join of the partition, region and account)."""
    if isinstance(value, str):
        return value
    [(fn, args)] = value.items()
    assert fn == "Fn::Join", value
    pseudo = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT}
    return args[0].join(p if isinstance(p, str) else pseudo[p["Ref"]] for p in args[1])


def _secret_reads(template: dict[str, Any], handler: str) -> tuple[set[str], set[str]]:
    """(the ARNs of secrets named outright, the logical ids of the stack's own secrets) the handler may read."""
    named: set[str] = set()
    own: set[str] = set()
    for st in statements_of(template, handler):
        if not any(a.startswith("secretsmanager:") for a in actions(st)):
            continue
        for resource in statement_resources(st):
            ids = referenced_ids(resource)
            if ids:
                own |= ids
            else:
                assert "secretsmanager:GetSecretValue" in actions(st)
                named.add(_resolved(resource))
    return named, own


def test_the_mcp_callers_read_exactly_the_mcp_servers_secrets(planner_tpl) -> None:
    expected = {f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{BY_NAME}-??????", BY_ARN}
    for handler in topology.HANDLERS:
        named, _ = _secret_reads(planner_tpl, handler)
        assert named == (expected if handler in MCP_CALLERS else set()), handler


def test_the_grant_is_get_secret_value_alone(planner_tpl) -> None:
    for handler in MCP_CALLERS:
        grants = [
            st
            for st in statements_of(planner_tpl, handler)
            if any(a.startswith("secretsmanager:") for a in actions(st))
            and not any(referenced_ids(r) for r in statement_resources(st))
        ]
        assert [actions(st) for st in grants] == [["secretsmanager:GetSecretValue"]]
        assert "Condition" not in grants[0]


def test_an_agent_without_mcp_servers_reads_no_other_secret(synth) -> None:
    for stack in synth.agent_stacks:
        if stack == "Flightdeck-planner":
            continue
        for handler in topology.HANDLERS:
            named, _ = _secret_reads(synth.templates[stack], handler)
            assert named == set(), (stack, handler)
