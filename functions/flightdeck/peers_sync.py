"""`flightdeck peers sync --config FILE`: every token a deployment file implies, issued and put where it is used.

What the file implies (grants()):

- each agent of the file that another one delegates to (over the flightdeck protocol) takes that delegator as a
  peer: a token registered in the delegate's peer registry (its SHA-256) and a usage key in its default plan, the
  token itself put in the delegator's peer tokens secret (PEER_TOKENS_SECRET_ARN's: the JSON object service ->
  token) under the delegate's service name;
- each delegator takes a `user` peer: you, with `flightdeck chat`, curl or the console, its token for the user
  channel (docs/PEERS.md, "Roles"). Its token is printed on stdout, once;
- each `[[agents.X.mcp_servers]]` entry that is another agent Y of the file (its url under X's
  `allowed_hosts.Y`) takes an MCP client key: the peer `X-mcp` at Y, scoped to the mcp channel (as
  `flightdeck peers add --channel mcp`), the key itself put as the whole value of the secret its
  `credential = "secret:NAME"` names (created if missing), which X's functions read. Such an entry without a
  secret credential is named on stderr: there is nowhere to put its key.

Each secret is read, merged and put back: the entries of other services stay (`put-secret-value` replaces the
whole value; a hand-put token for a peer outside the file is kept). A rerun issues nothing new: a token in a
secret whose hash the registry holds, and a `user` peer already active, are kept. A token that is missing or
does not match (the secret lost an entry, a peer was revoked) is issued again (added, or rotated with no grace).
Adding an agent to the file and rerunning issues only what the new agent implies.

Where: on AWS the outputs of each agent's stack Flightdeck-<agent> (StateTableName, PeerUsagePlanId,
PeerTokensSecretArn), found before anything changes. With --endpoint-url (a moto server), the local names:
the table <agent>-state, the plan flightdeck-<agent>-peers and the secret flightdeck-<agent>-peer-tokens
(created if missing). `flightdeck local up` needs none of this: it registers the file's LOCAL ONLY tokens itself.

MCP clients outside the file (Claude Desktop, an IDE) are not implied by it: `flightdeck peers add --channel mcp`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flightdeck import config_check, config_file, config_models, topology
from flightdeck.domain.allowlist import Allowlist
from flightdeck.peers_admin import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    PLAN_OUTPUT,
    TABLE_OUTPUT,
    AdminError,
    _session,
    _Stack,
    credentials_problem,
)

SECRET_OUTPUT = "PeerTokensSecretArn"
# With --endpoint-url: the peer tokens secret of an agent (on AWS the stack names it).
LOCAL_SECRET_NAME = "flightdeck-{agent}-peer-tokens"
USER_PEER = "user"
USER_CHANNEL = "user"
# The peer id of agent X's MCP client key at another agent of the file: its own peer, apart from X's delegation
# token (each is rotated or revoked alone; each has its own usage key).
MCP_PEER = "{client}-mcp"
MCP_CHANNEL = "mcp"
SECRET_CREDENTIAL = "secret:"
_DEPLOY_FIRST = "--endpoint-url for a moto server, or deploy the stack first (cdk deploy)"


@dataclass(frozen=True)
class Grant:
    """One caller's token at one agent."""

    agent: str  # whose registry takes it
    peer: str  # the caller's peer id (the token is fdp_<peer>_...)
    holder: str = ""  # the agent whose secret holds the token ("": the user's, printed)
    service: str = ""  # its key in the holder's secret: the agent's name in the holder's ALLOWED_HOST_MAPPING
    secret: str = ""  # an MCP client key: the secret that holds it whole (its credential's NAME); "": none


def mcp_server_agent(deployment: config_models.DeploymentFile, client: str, url: str) -> str | None:
    """The agent of the file an MCP server URL of `client` is: the one whose allowed_hosts base URL it lies under."""
    for name, base in deployment.agents[client].allowed_hosts.items():
        if name in deployment.agents and name != client and Allowlist({name: base.rstrip("/")}).allows_url(url):
            return name
    return None


def mcp_without_secret(deployment: config_models.DeploymentFile) -> list[str]:
    """MCP server entries that are agents of the file but name no secret to put a key in (the keys' TOML)."""
    return [
        f"{config_file.toml_key(('agents', name, 'mcp_servers', index))} credential"
        for name, spec in deployment.agents.items()
        for index, server in enumerate(spec.mcp_servers)
        if mcp_server_agent(deployment, name, server.url) and not server.credential.startswith(SECRET_CREDENTIAL)
    ]


def grants(deployment: config_models.DeploymentFile) -> list[Grant]:
    """Every token the file implies, in file order, each once."""
    found: list[Grant] = []
    for name, spec in deployment.agents.items():
        targets = [
            d.peer_service for d in spec.delegates if d.protocol == "flightdeck" and d.peer_service in deployment.agents
        ]
        if targets:
            found.append(Grant(name, USER_PEER))
        found.extend(Grant(target, name, name, target) for target in targets)
        for server in spec.mcp_servers:
            target = mcp_server_agent(deployment, name, server.url)
            if target and server.credential.startswith(SECRET_CREDENTIAL):
                secret = server.credential.removeprefix(SECRET_CREDENTIAL)
                found.append(Grant(target, MCP_PEER.format(client=name), name, server.name, secret))
    return list(dict.fromkeys(found))


@dataclass
class Outcome:
    issued: list[Grant] = field(default_factory=list)
    kept: list[Grant] = field(default_factory=list)
    user_tokens: dict[str, str] = field(default_factory=dict)  # agent -> the user's new token


class _Where:
    """The table, default usage plan and peer tokens secret of each agent: the stack's outputs, or the local names."""

    def __init__(self, args: argparse.Namespace, session: Any):
        self.endpoint_url = args.endpoint_url or None
        self.session = session
        self.dynamodb = session.client("dynamodb", endpoint_url=self.endpoint_url)
        self.secrets = session.client("secretsmanager", endpoint_url=self.endpoint_url)
        from flightdeck.adapters.usage_plans import UsagePlans

        self.plans = UsagePlans(session.client("apigateway", endpoint_url=self.endpoint_url))
        self._stacks: dict[str, _Stack] = {}

    def _stack(self, agent: str) -> _Stack:
        if agent not in self._stacks:
            self._stacks[agent] = _Stack(argparse.Namespace(agent=agent), self.session)
        return self._stacks[agent]

    def table(self, agent: str) -> str:
        if self.endpoint_url:
            return topology.table_name(agent)
        return self._stack(agent).output(TABLE_OUTPUT, "table", _DEPLOY_FIRST)

    def plan_id(self, agent: str) -> str:
        from flightdeck.adapters.usage_plans import UsagePlanNotFoundError
        from flightdeck.domain.peer_usage import default_plan_name

        if self.endpoint_url:
            try:
                return str(self.plans.plan_id(default_plan_name(agent)))
            except UsagePlanNotFoundError:
                raise AdminError(
                    f"no usage plan named {default_plan_name(agent)!r} at {self.endpoint_url}: is agent {agent!r} "
                    "running there?"
                ) from None
        return self._stack(agent).output(PLAN_OUTPUT, "usage plan", _DEPLOY_FIRST)

    def secret_id(self, agent: str) -> str:
        if self.endpoint_url:
            return LOCAL_SECRET_NAME.format(agent=agent)
        return self._stack(agent).output(SECRET_OUTPUT, "peer tokens secret", _DEPLOY_FIRST)

    def read_key(self, secret_id: str) -> str:
        """An MCP client key: the secret's whole value ("" when the secret does not exist yet)."""
        from botocore.exceptions import ClientError

        try:
            return str(self.secrets.get_secret_value(SecretId=secret_id).get("SecretString", ""))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            return ""

    def put_key(self, secret_id: str, token: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.secrets.put_secret_value(SecretId=secret_id, SecretString=token)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            self.secrets.create_secret(
                Name=secret_id, SecretString=token, Description="Flightdeck: an MCP client key (flightdeck peers sync)"
            )

    def read_secret(self, agent: str, secret_id: str) -> dict[str, str]:
        from botocore.exceptions import ClientError

        try:
            text = self.secrets.get_secret_value(SecretId=secret_id)["SecretString"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            if not self.endpoint_url:
                raise AdminError(
                    f"the peer tokens secret of {agent!r} ({secret_id}) does not exist: deploy its stack first"
                ) from None
            self.secrets.create_secret(Name=secret_id, SecretString="{}")
            return {}
        try:
            held = json.loads(text)
        except ValueError:
            held = None
        if not isinstance(held, dict) or not all(isinstance(v, str) for v in held.values()):
            raise AdminError(
                f"the peer tokens secret of {agent!r} ({secret_id}) is not a JSON object of service -> token: "
                "correct it (or put {}) and run sync again"
            )
        return held


def sync(deployment: config_models.DeploymentFile, where: _Where) -> Outcome:
    """Issue what is missing; merge each delegator's new tokens into its secret. Finds every table, plan and
    secret before it changes anything."""
    from flightdeck.adapters.peer_registry import PeerRegistry
    from flightdeck.domain.peers import ACTIVE, new_token, token_sha256

    wanted = grants(deployment)
    callees = list(dict.fromkeys(g.agent for g in wanted))
    holders = list(dict.fromkeys(g.holder for g in wanted if g.holder and not g.secret))
    registries = {agent: PeerRegistry(where.table(agent), where.dynamodb) for agent in callees}
    # An agent on the lean front door has no usage plans (docs/FRONT_DOORS.md): its peers get a token alone.
    plan_ids = {
        agent: None if deployment.agents[agent].deploy.front_door == "lean" else where.plan_id(agent)
        for agent in callees
    }
    secret_ids = {agent: where.secret_id(agent) for agent in holders}
    held = {agent: where.read_secret(agent, secret_ids[agent]) for agent in holders}
    keys = {g.secret: where.read_key(g.secret) for g in wanted if g.secret}
    outcome = Outcome()
    fresh: dict[str, dict[str, str]] = {agent: {} for agent in holders}
    fresh_keys: dict[str, str] = {}
    for grant in wanted:
        registry = registries[grant.agent]
        record = registry.get_peer(grant.peer)
        active = record is not None and record.status == ACTIVE
        if grant.secret:
            current = keys[grant.secret]
            ok = (
                active
                and record is not None
                and MCP_CHANNEL in record.channels
                and bool(current)
                and token_sha256(current) == record.token_sha256
            )
        elif grant.holder:
            current = held[grant.holder].get(grant.service, "")
            ok = active and bool(current) and record is not None and token_sha256(current) == record.token_sha256
        else:  # the user: a token for the user channel (one made before roles were is a peer agent's: replaced)
            ok = active and record is not None and USER_CHANNEL in record.channels
        # The key before the token (as `peers add`): a token API Gateway would refuse is never handed out.
        plan_id = plan_ids[grant.agent]
        if plan_id is not None:
            where.plans.ensure_peer_key(grant.agent, grant.peer, plan_id)
        if ok:
            outcome.kept.append(grant)
            continue
        token = new_token(grant.peer)
        if grant.secret:
            # Scoped to MCP alone (replacing an active record of another scope, or a lost key's hash).
            registry.add(grant.peer, token, replace=active, channels=(MCP_CHANNEL,))
        elif not grant.holder:
            registry.add(grant.peer, token, replace=active, channels=(USER_CHANNEL,))
        elif active:
            registry.rotate(grant.peer, token)
        else:
            registry.add(grant.peer, token)
        outcome.issued.append(grant)
        if grant.secret:
            fresh_keys[grant.secret] = token
        elif grant.holder:
            fresh[grant.holder][grant.service] = token
        else:
            outcome.user_tokens[grant.agent] = token
    for agent, tokens in fresh.items():
        if not tokens:
            continue
        # Read again just before the put: an entry put meanwhile by hand is kept too.
        merged = {**where.read_secret(agent, secret_ids[agent]), **tokens}
        where.secrets.put_secret_value(SecretId=secret_ids[agent], SecretString=json.dumps(merged, sort_keys=True))
    for secret_id, token in fresh_keys.items():
        where.put_key(secret_id, token)
    return outcome


def _say(message: str) -> None:
    print(f"flightdeck: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        deployment = config_check.load_checked(args.config, "aws", allow_open_agents=True)
    except config_file.ConfigFileError as exc:
        _say("invalid deployment file:\n" + "".join(f"  {line}\n" for line in str(exc).splitlines()).rstrip())
        return EXIT_USAGE
    try:
        outcome = sync(deployment, _Where(args, _session(args)))
    except AdminError as exc:
        _say(str(exc))
        return exc.code
    except (BotoCoreError, ClientError) as exc:
        about_credentials = credentials_problem(exc)
        if about_credentials:
            _say(about_credentials)
            return EXIT_USAGE
        _say(f"AWS call failed: {exc}")
        return EXIT_FAILURE
    for agent, token in outcome.user_tokens.items():
        print(f"{agent} {token}", flush=True)
    for key in mcp_without_secret(deployment):
        _say(f'not issued: {key} is not "secret:NAME": an agent of this file as MCP server needs its key in a secret')
    for grant in outcome.issued:
        if grant.secret:
            _say(f"issued: {grant.peer} -> {grant.agent} (an MCP client key, put in the secret {grant.secret!r})")
        elif grant.holder:
            _say(
                f"issued: {grant.peer} -> {grant.agent} (put in {grant.holder}'s peer tokens secret as {grant.service!r})"
            )
        else:
            _say(f"issued: {grant.peer} -> {grant.agent}: its token is printed above, only once")
    kept_users = [g.agent for g in outcome.kept if not g.holder]
    if kept_users:
        _say(
            f"the {USER_PEER} peer of {', '.join(kept_users)} already has a token (not shown again; "
            f"`flightdeck peers rotate --agent NAME {USER_PEER}` gives a new one)"
        )
    _say(f"{len(outcome.issued)} token(s) issued, {len(outcome.kept)} kept")
    return EXIT_OK


def add_sync_command(actions: Any) -> None:
    sub = actions.add_parser(
        "sync",
        help="issue every token a deployment file implies and merge them into the delegators' secrets",
        description="Issue every token the deployment file implies: each delegator's token at each agent it "
        "delegates to (registered there, with a usage key, and merged into the delegator's peer tokens secret "
        "without dropping its other entries), and a `user` token at each delegator, printed on stdout once as "
        "'<agent> <token>', and an MCP client key for each MCP server entry that is an agent of the file, put in "
        "the secret its credential names. Rerunning issues only what is missing (after adding an agent, or a lost "
        "entry).",
        epilog="examples:\n"
        "  flightdeck peers sync --config examples/three-agents.toml            # against the deployed stacks\n"
        "  flightdeck peers sync --config my.toml --endpoint-url http://127.0.0.1:5000   # against moto",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument("--config", type=Path, required=True, metavar="FILE", help="the deployment file")
    sub.add_argument(
        "--endpoint-url",
        help="endpoint of DynamoDB, API Gateway and Secrets Manager: a moto server (local names, see the module)",
    )
    sub.add_argument("--region", help="AWS region (default: from the AWS configuration)")
    sub.set_defaults(run=run)
