"""`flightdeck peers sync --config FILE` against a moto server (DynamoDB, API Gateway, Secrets Manager):
with two, three and five agents, every token the file implies is registered where it is checked and put in the
delegator's secret where it is presented; each MCP server entry that is an agent of the file gets its client's
MCP key, scoped to the mcp channel, in the secret its credential names; a rerun issues nothing; an added agent, a
lost entry and a hand-put token of a peer outside the file are handled without losing a token from any secret."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import boto3
import pytest

from flightdeck import cli
from flightdeck.adapters.peer_registry import PeerRegistry
from flightdeck.adapters.usage_plans import UsagePlans
from flightdeck.domain.peer_usage import PeerLimits, UsagePlanSpec, default_plan_name, usage_key
from flightdeck.domain.peers import AuthStatus, authenticate, judge, peer_of, proof_of
from flightdeck.local.resources import create_table
from flightdeck.peers_sync import LOCAL_SECRET_NAME, Grant, grants, mcp_without_secret

REGION = "us-east-1"


def client_of(endpoint: str):
    return client("secretsmanager", endpoint)


def client(service: str, endpoint: str):
    return boto3.client(
        service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t"
    )


class Team:
    """A deployment file of agents `<prefix>-<name>`, each deployed (its table and default usage plan) on moto."""

    def __init__(
        self, endpoint: str, tmp_path: Path, delegates: dict[str, list[str]], mcp: dict[str, list[str]] | None = None
    ):
        self.endpoint, self.path = endpoint, tmp_path / "team.toml"
        self.prefix = f"t{uuid.uuid4().hex[:6]}"
        self.delegates: dict[str, list[str]] = {}
        self.mcp: dict[str, list[str]] = {}
        self.deployed: set[str] = set()
        self.write(delegates, mcp)

    def name(self, short: str) -> str:
        return f"{self.prefix}-{short}"

    def key_secret(self, client: str, server: str) -> str:
        """The secret client's credential names for server's MCP key."""
        return f"{self.prefix}/{client}/mcp-{server}"

    def write(self, delegates: dict[str, list[str]], mcp: dict[str, list[str]] | None = None) -> None:
        """The file: each agent delegating to the ones listed, every `allow` both ways, and using the MCP tools of
        the agents `mcp` lists (their URLs under its allowed_hosts); then each new agent deployed."""
        self.delegates, self.mcp = delegates, mcp or {}
        callers: dict[str, list[str]] = {a: [] for a in delegates}
        for caller, targets in delegates.items():
            for target in targets:
                callers[target].append(caller)
        lines = []
        for agent, targets in delegates.items():
            allow = json.dumps([self.name(a) for a in dict.fromkeys([*targets, *callers[agent]])])
            servers = self.mcp.get(agent, [])
            hosts = ", ".join(f'{self.name(s)} = "https://{s}.example/prod"' for s in servers)
            lines += [f"[agents.{self.name(agent)}]", f'description = "{agent}"', f"allow = {allow}"]
            lines += [f"allowed_hosts = {{ {hosts} }}", ""]
            for target in targets:
                lines += [f"[[agents.{self.name(agent)}.delegates]]", f'agent = "{self.name(target)}"', ""]
            for server in servers:
                lines += [
                    f"[[agents.{self.name(agent)}.mcp_servers]]",
                    f'name = "{server}-tools"',
                    f'url = "https://{server}.example/prod/mcp"',
                    f'credential = "secret:{self.key_secret(agent, server)}"',
                    "",
                ]
        self.path.write_text("\n".join(lines))
        plans = UsagePlans(client("apigateway", self.endpoint))
        for agent in delegates:
            if agent not in self.deployed:
                create_table(client("dynamodb", self.endpoint), self.name(agent))
                plans.ensure_plan(
                    self.name(agent),
                    UsagePlanSpec(default_plan_name(self.name(agent)), PeerLimits(5, 10), (), default=True),
                )
                self.deployed.add(agent)

    def sync(self, capsys) -> tuple[dict[str, str], str]:
        """Run `flightdeck peers sync`: (agent -> user token printed, stderr)."""
        capsys.readouterr()
        code = cli.main(["peers", "sync", "--config", str(self.path), "--endpoint-url", self.endpoint])
        out, err = capsys.readouterr()
        assert code == 0, err
        printed = dict(line.split(" ") for line in out.splitlines())
        return printed, err

    def registry(self, agent: str) -> PeerRegistry:
        return PeerRegistry(f"{self.name(agent)}-state", client("dynamodb", self.endpoint))

    def secret(self, agent: str) -> dict[str, str]:
        secret_id = LOCAL_SECRET_NAME.format(agent=self.name(agent))
        value: dict[str, str] = json.loads(
            client("secretsmanager", self.endpoint).get_secret_value(SecretId=secret_id)["SecretString"]
        )
        return value

    def put_secret(self, agent: str, value: dict[str, str]) -> None:
        secret_id = LOCAL_SECRET_NAME.format(agent=self.name(agent))
        client("secretsmanager", self.endpoint).put_secret_value(SecretId=secret_id, SecretString=json.dumps(value))

    def secrets(self) -> dict[str, dict[str, str]]:
        return {a: self.secret(a) for a, targets in self.delegates.items() if targets}

    def key(self, client: str, server: str) -> str:
        secret_id = self.key_secret(client, server)
        return str(client_of(self.endpoint).get_secret_value(SecretId=secret_id)["SecretString"])

    def keys(self) -> dict[tuple[str, str], str]:
        return {(c, server): self.key(c, server) for c, servers in self.mcp.items() for server in servers}

    def assert_every_token_works(self, users: dict[str, str]) -> None:
        """Each delegator's secret holds, for each agent it delegates to, a token that agent accepts, with a
        usage key in a plan; each delegator accepts its user's token."""
        apigateway = UsagePlans(client("apigateway", self.endpoint))
        for caller, targets in self.delegates.items():
            for target in targets:
                token = self.secret(caller)[self.name(target)]
                assert peer_of(token) == self.name(caller)
                assert authenticate(self.registry(target), token, 0).status == AuthStatus.OK
                found = apigateway.lookup(usage_key(self.name(target), self.name(caller)))
                assert found is not None and found.enabled and found.plan_id
        for agent, token in users.items():
            short = agent.removeprefix(self.prefix + "-")
            assert self.delegates[short], f"{agent} delegates to nobody: no user token"
            assert authenticate(self.registry(short), token, 0).status == AuthStatus.OK
        for user_of_tools, servers in self.mcp.items():
            for server in servers:
                key = self.key(user_of_tools, server)
                assert peer_of(key) == f"{self.name(user_of_tools)}-mcp"
                record = self.registry(server).get_peer(peer_of(key))
                assert judge(record, proof_of(key, 0, ("mcp",))).status == AuthStatus.OK
                assert judge(record, proof_of(key, 0, ("a2a",))).status == AuthStatus.OUT_OF_SCOPE  # MCP alone
                found = apigateway.lookup(usage_key(self.name(server), peer_of(key)))
                assert found is not None and found.enabled and found.plan_id


def test_two_agents_then_a_rerun_issues_nothing(moto_server, tmp_path, capsys):
    # The orchestrator delegates to the worker and uses the worker's skills as MCP tools too.
    team = Team(moto_server, tmp_path, {"orchestrator": ["worker"], "worker": []}, mcp={"orchestrator": ["worker"]})
    users, err = team.sync(capsys)
    assert list(users) == [team.name("orchestrator")] and users[team.name("orchestrator")].startswith("fdp_user_")
    assert "3 token(s) issued, 0 kept" in err
    assert f"(an MCP client key, put in the secret '{team.key_secret('orchestrator', 'worker')}')" in err
    team.assert_every_token_works(users)
    before, keys = team.secrets(), team.keys()
    hashes = {p.peer_id: p.token_sha256 for p in team.registry("worker").list_peers()}
    assert set(hashes) == {team.name("orchestrator"), team.name("orchestrator") + "-mcp"}  # two keys, two peers
    again, err = team.sync(capsys)
    assert again == {} and "0 token(s) issued, 3 kept" in err
    assert "already has a token (not shown again" in err
    assert team.secrets() == before and team.keys() == keys
    assert {p.peer_id: p.token_sha256 for p in team.registry("worker").list_peers()} == hashes
    team.assert_every_token_works(users)


def test_three_agents_one_secret_holds_both_tokens_and_keeps_a_hand_put_one(moto_server, tmp_path, capsys):
    # The researcher delegates to nobody but uses the critic's MCP tools: a key, no user token.
    team = Team(
        moto_server,
        tmp_path,
        {"orchestrator": ["researcher", "critic"], "researcher": [], "critic": []},
        mcp={"researcher": ["critic"]},
    )
    outside = {"partner": "fdp_" + team.name("orchestrator") + "_handed-over-by-partner-0123456789abcdef"}
    client("secretsmanager", moto_server).create_secret(
        Name=LOCAL_SECRET_NAME.format(agent=team.name("orchestrator")), SecretString=json.dumps(outside)
    )
    users, _ = team.sync(capsys)
    held = team.secret("orchestrator")
    assert set(held) == {"partner", team.name("researcher"), team.name("critic")}
    assert held["partner"] == outside["partner"]  # merged, not replaced
    assert list(users) == [team.name("orchestrator")]
    team.assert_every_token_works(users)


def test_five_agents_an_added_agent_and_a_lost_entry_lose_no_token(moto_server, tmp_path, capsys):
    four = {"lead": ["plan", "build"], "plan": ["check"], "build": ["check"], "check": []}
    team = Team(moto_server, tmp_path, four, mcp={"plan": ["build"]})
    users, err = team.sync(capsys)
    assert sorted(users) == sorted(team.name(a) for a in ("lead", "plan", "build"))
    assert "8 token(s) issued" in err  # 4 delegations, 3 users, 1 MCP key
    team.assert_every_token_works(users)
    before, keys = team.secrets(), team.keys()

    # A fifth agent: the lead and the checker delegate to it, the lead uses its MCP tools as well.
    team.write(
        {**four, "lead": ["plan", "build", "docs"], "check": ["docs"], "docs": []},
        {"plan": ["build"], "lead": ["docs"]},
    )
    added, err = team.sync(capsys)
    assert list(added) == [team.name("check")]  # the checker became a delegator: its user is new
    assert "4 token(s) issued, 8 kept" in err
    after = team.secrets()
    for agent, held in before.items():
        assert after[agent].items() >= held.items(), f"{agent}'s secret lost a token"
    assert set(after["lead"]) - set(before["lead"]) == {team.name("docs")}
    assert team.keys().items() >= keys.items() and set(team.keys()) - set(keys) == {("lead", "docs")}
    team.assert_every_token_works({**users, **added})

    # A token lost from a secret (put by hand without it) and an MCP key overwritten: only they are issued again.
    lost = dict(after["build"])
    del lost[team.name("check")]
    team.put_secret("build", lost)
    old_key = team.key("plan", "build")
    client_of(moto_server).put_secret_value(SecretId=team.key_secret("plan", "build"), SecretString="overwritten")
    again, err = team.sync(capsys)
    assert again == {} and "2 token(s) issued" in err
    assert team.secret("build")[team.name("check")] != after["build"][team.name("check")]
    assert {a: s for a, s in team.secrets().items() if a != "build"} == {a: s for a, s in after.items() if a != "build"}
    assert team.key("lead", "docs") != "overwritten" and team.key("plan", "build") not in ("overwritten", old_key)
    team.assert_every_token_works({**users, **added})
    assert authenticate(team.registry("check"), after["build"][team.name("check")], 0).status != AuthStatus.OK
    assert authenticate(team.registry("build"), old_key, 0).status != AuthStatus.OK


def test_what_a_file_implies():
    from flightdeck import config_file

    deployment = config_file.load(Path(__file__).resolve().parents[2] / "examples" / "three-agents.toml")
    assert grants(deployment) == [
        Grant("orchestrator", "user"),
        Grant("researcher", "orchestrator", "orchestrator", "researcher"),
        Grant("critic", "orchestrator", "orchestrator", "critic"),
    ]


def test_which_mcp_servers_imply_a_key(tmp_path):
    from flightdeck import config_file

    base = (Path(__file__).resolve().parents[2] / "examples" / "three-agents.toml").read_text()
    servers = """
[[agents.critic.mcp_servers]]
name = "research"                      # an agent of the file: under allowed_hosts.researcher
url = "https://r.example/prod/mcp"
credential = "secret:critic/mcp-researcher"

[[agents.critic.mcp_servers]]
name = "notes"                         # a server outside the file: no key of ours
url = "https://notes.example/mcp"
credential = "secret:notes-token"

[[agents.critic.mcp_servers]]
name = "research-open"                 # an agent of the file, but no secret to put its key in
url = "https://r.example/prod/mcp"
"""
    path = tmp_path / "agents.toml"
    path.write_text(
        base.replace(
            "[agents.critic]\n",
            '[agents.critic]\nallowed_hosts = { researcher = "https://r.example/prod", notes = "https://notes.example" }\n',
        )
        + servers
    )
    deployment = config_file.load(path)
    assert grants(deployment)[3:] == [Grant("researcher", "critic-mcp", "critic", "research", "critic/mcp-researcher")]
    assert mcp_without_secret(deployment) == ["[[agents.critic.mcp_servers]] #3 credential"]


def test_a_missing_plan_changes_nothing_and_says_so(moto_server, tmp_path, capsys):
    team = Team(moto_server, tmp_path, {"orchestrator": ["worker"], "worker": []})
    team.path.write_text(team.path.read_text().replace(team.prefix, team.prefix + "x"))
    code = cli.main(["peers", "sync", "--config", str(team.path), "--endpoint-url", moto_server])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert f"no usage plan named 'flightdeck-{team.prefix}x-" in err and "is agent" in err


@pytest.mark.parametrize("bad", ["not json", '["a list"]'])
def test_a_secret_that_is_not_a_token_map_is_refused_before_any_token_is_issued(moto_server, tmp_path, capsys, bad):
    team = Team(moto_server, tmp_path, {"orchestrator": ["worker"], "worker": []})
    client("secretsmanager", moto_server).create_secret(
        Name=LOCAL_SECRET_NAME.format(agent=team.name("orchestrator")), SecretString=bad
    )
    code = cli.main(["peers", "sync", "--config", str(team.path), "--endpoint-url", moto_server])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and "is not a JSON object of service -> token" in err
    assert team.registry("worker").list_peers() == [] and team.registry("orchestrator").list_peers() == []


def test_an_agent_on_the_lean_front_door_gets_tokens_and_needs_no_usage_plan(moto_server, tmp_path, capsys):
    team = Team(moto_server, tmp_path, {"orchestrator": ["worker"], "worker": []})
    worker, orchestrator = team.name("worker"), team.name("orchestrator")
    # A lean agent's stack has no usage plan (docs/FRONT_DOORS.md): none here either, and the file says lean.
    plans = UsagePlans(client("apigateway", moto_server))
    plans.client.delete_usage_plan(usagePlanId=plans.plan_id(default_plan_name(worker)))
    team.path.write_text(team.path.read_text() + f'\n[agents.{worker}.deploy]\nfront_door = "lean"\n')
    team.sync(capsys)
    record = team.registry("worker").get_peer(orchestrator)
    assert record is not None and record.status == "active"
    assert plans.lookup(usage_key(worker, orchestrator)) is None  # no key: nothing meters the lean door
    assert team.secret("orchestrator")[worker]  # the delegator holds its token for the worker
