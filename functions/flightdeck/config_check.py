"""The check of a whole deployment file at start: what its agents need of each other (delegates, `allow` both
ways, peer tokens, card and MCP URLs under the allowed hosts) and of where they run (the model, the front door,
inbound authentication on AWS). `load_checked`: flightdeck.config_file.load, then `check`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from flightdeck.config_file import distinct, load, toml_key
from flightdeck.config_models import ConfigFileError, DeploymentFile, Problem
from flightdeck.domain.agent import ModelConfig
from flightdeck.domain.allowlist import Allowlist
from flightdeck.domain.peers import PeerTokenError, new_token
from flightdeck.model_ids import EXAMPLE_MODEL_ID, MODEL_ID_FIX, is_bedrock_model_id

# Where the file runs: "local" (`flightdeck local up|demo`, `flightdeck bench`: every agent on this
# machine, state in moto) or "aws" (`app.py` / `cdk synth`: one stack per agent).
Runtime = Literal["local", "aws"]


def _door_problems(deployment: DeploymentFile) -> list[Problem]:
    """The console is MOCK methods of the REST API (infra/console.py): the lean door's HTTP API has none."""
    return [
        Problem(
            toml_key(("agents", name, "deploy", "console")),
            'needs front_door = "rest": the console is served by the REST API, which the lean door has not',
            'set console = false, or front_door = "rest"',
        )
        for name, spec in deployment.agents.items()
        if spec.deploy.console and spec.deploy.front_door == "lean"
    ]


def _delegate_key(agent: str, index: int, field_name: str = "") -> str:
    return toml_key(("agents", agent, "delegates", index, *([field_name] if field_name else [])))


def _with(items: Sequence[str], name: str) -> str:
    return "[" + ", ".join(json.dumps(i) for i in [*items, name]) + "]"


def _nearest(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    return close[0] if close else ""


def check(
    deployment: DeploymentFile,
    path: str | Path,
    runtime: Runtime,
    *,
    local_model: bool = False,
    aws_credentials: bool = False,
    allow_open_agents: bool = False,
) -> DeploymentFile:
    """Everything the agents of the file need of each other and of where they run, checked at start.

    - a delegate names an agent of the file (or an outside service of `allowed_hosts`);
    - the delegator's `allow` names it, and its `allow` names the delegator (the answer's way back);
    - locally, the delegate's `peers` has a token for the delegator (without one: 401);
    - every `allow` name resolves to a URL;
    - the model can run here: Bedrock needs a model_id, and under `flightdeck local` AWS credentials
      (aws_credentials) or local_model=True, which runs such agents with the local model instead;
    - on AWS, no agent has inbound authentication off (INBOUND_AUTH), unless allow_open_agents (the CDK
      context key of the same name) says an isolated test rig is meant.

    Returns the deployment to run (local_model applied); ConfigFileError lists every problem.
    """
    problems: list[Problem] = []
    if runtime == "aws" and not allow_open_agents:
        problems.extend(_open_agent_problems(deployment))
    problems.extend(_mcp_problems(deployment, runtime))
    problems.extend(_door_problems(deployment))
    agents = deployment.agents
    names = list(agents)
    for name, spec in agents.items():
        allowed = set(spec.allow) | set(spec.allowed_hosts)
        for index, delegate in enumerate(spec.delegates):
            target = delegate.peer_service
            target_key = _delegate_key(name, index, "service" if delegate.service else "agent")
            if delegate.protocol == "a2a":
                problems.extend(_card_url_problems(deployment, name, index, runtime))
                continue
            outside = target in spec.allowed_hosts or (runtime == "aws" and target in spec.deploy.peer_urls)
            if target not in agents and not outside:
                nearest = _nearest(target, [n for n in names if n != name])
                problems.append(
                    Problem(
                        target_key,
                        f'no agent "{target}" in this file',
                        f'did you mean "{nearest}"?'
                        if nearest
                        else f"name one of its agents ({', '.join(names)}), or a service outside the file listed in "
                        f"[agents.{name}].allowed_hosts",
                    )
                )
                continue
            if target not in allowed:
                problems.append(
                    Problem(
                        toml_key(("agents", name, "allow")),
                        f'lacks "{target}", which {_delegate_key(name, index)} delegates to: every dispatch would be refused',
                        f"allow = {_with(spec.allow, target)}",
                    )
                )
            peer = agents.get(target)
            if peer is None:
                continue
            callback = delegate.callback_service or name
            if callback not in peer.allow and callback not in peer.allowed_hosts:
                problems.append(
                    Problem(
                        toml_key(("agents", target, "allow")),
                        f'lacks "{callback}": {target} could not send its answers back to {name} '
                        f"(delegated to by {_delegate_key(name, index)})",
                        f"allow = {_with(peer.allow, callback)}",
                    )
                )
            if runtime == "local" and deployment.environment(target).get("INBOUND_AUTH", "required") != "off":
                problems.extend(_token_problems(deployment, name, target, index))
        for allowed_name in spec.allow:
            if allowed_name in agents or allowed_name in spec.allowed_hosts:
                continue
            if runtime == "aws":
                continue  # resolved through deploy.peer_urls, or reported by the stack until it is known
            nearest = _nearest(allowed_name, names)
            problems.append(
                Problem(
                    toml_key(("agents", name, "allow")),
                    f'names "{allowed_name}", which is neither an agent of this file nor in [agents.{name}].allowed_hosts',
                    f'did you mean "{nearest}"?'
                    if nearest
                    else f'remove it, or give its URL: allowed_hosts = {{ {allowed_name} = "https://..." }}',
                )
            )
    fallback: list[str] = []
    for name, spec in agents.items():
        model_key = toml_key(("agents", name, "model"))
        if spec.model.provider != "bedrock":
            continue
        if not spec.model.model_id.strip():
            problems.append(
                Problem(
                    f"{model_key}.model_id",
                    'is required with provider = "bedrock"',
                    f"add model_id = {json.dumps(EXAMPLE_MODEL_ID)} (a model id, an inference profile id or an ARN)",
                )
            )
        elif not is_bedrock_model_id(spec.model.model_id):
            problems.append(
                Problem(
                    f"{model_key}.model_id",
                    f"{json.dumps(spec.model.model_id)} is not a Bedrock model id",
                    MODEL_ID_FIX,
                )
            )
        if runtime == "local" and local_model:
            fallback.append(name)
        elif runtime == "local" and not aws_credentials:
            problems.append(
                Problem(
                    f"{model_key}.provider",
                    '"bedrock" cannot run here: `flightdeck local` has no AWS credentials to call Bedrock with '
                    "(the local stack's moto has no Bedrock)",
                    'set provider = "local" (deterministic, offline), or pass --local-model to run it with the local '
                    "model this time, or provide AWS credentials (aws configure, AWS_PROFILE or AWS_ACCESS_KEY_ID/"
                    "AWS_SECRET_ACCESS_KEY) with access to that model in us-east-1",
                )
            )
    if problems:
        raise ConfigFileError.of(path, distinct(problems))
    if not fallback:
        return deployment
    variant = deployment.model_copy(deep=True)
    for name in fallback:
        variant.agents[name].model = ModelConfig(provider="local")
    return variant


def _card_url_problems(deployment: DeploymentFile, name: str, index: int, runtime: Runtime) -> list[Problem]:
    """An A2A delegate's card_url under a base URL the agent may call (ALLOWED_HOST_MAPPING): its allowed_hosts,
    on AWS also the deploy.peer_urls of the names it allows. A delegate that is an agent of this file, allowed,
    is left to run time: its local URL is known only once it listens."""
    spec = deployment.agents[name]
    delegate = spec.delegates[index]
    if delegate.peer_service in deployment.agents and delegate.peer_service in spec.allow:
        return []
    hosts = {k: v.rstrip("/") for k, v in spec.allowed_hosts.items()}
    if runtime == "aws":
        hosts.update({k: v.rstrip("/") for k, v in spec.deploy.peer_urls.items() if k in spec.allow and k not in hosts})
    if Allowlist(hosts).allows_url(delegate.card_url):
        return []
    service = delegate.peer_service
    return [
        Problem(
            _delegate_key(name, index, "card_url"),
            f"{delegate.card_url} is not under any base URL of [agents.{name}].allowed_hosts: the agent would refuse "
            "to fetch the card, and every delegation to it would fail",
            f'add its base URL: allowed_hosts = {{ {service} = "{_base_of(delegate.card_url)}" }} under '
            f"[agents.{name}] (or correct card_url)",
        )
    ]


def _mcp_problems(deployment: DeploymentFile, runtime: Runtime) -> list[Problem]:
    """Each MCP server's URL lies under one of its agent's allowed_hosts (the allowlist peers go through), and on
    AWS its credential is a secret (a Lambda function's environment holds no token of ours)."""
    problems: list[Problem] = []
    for name, spec in deployment.agents.items():
        allowlist = Allowlist({k: v.rstrip("/") for k, v in spec.allowed_hosts.items()})
        for index, server in enumerate(spec.mcp_servers):
            key = toml_key(("agents", name, "mcp_servers", index))
            if not allowlist.allows_url(server.url):
                problems.append(
                    Problem(
                        f"{key} url",
                        f"{server.url} is not under any base URL of [agents.{name}].allowed_hosts: every call would "
                        "be refused",
                        f'add its base URL, e.g. allowed_hosts = {{ {server.name} = "{_base_of(server.url)}" }}',
                    )
                )
            if runtime == "aws" and server.credential.startswith("env:"):
                problems.append(
                    Problem(
                        f"{key} credential",
                        f"{server.credential} names an environment variable, which a deployed agent does not have",
                        'use credential = "secret:<name>" (a Secrets Manager secret holding the token; the stack grants '
                        "its read)",
                    )
                )
    return problems


def _base_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _open_agent_problems(deployment: DeploymentFile) -> list[Problem]:
    """On AWS: an agent with INBOUND_AUTH = "off", one problem per table that sets it (naming its agents)."""
    open_by_key: dict[str, list[str]] = {}
    for name, spec in deployment.agents.items():
        if deployment.environment(name).get("INBOUND_AUTH", "required") != "off":
            continue
        table = toml_key(("agents", name, "env")) if "INBOUND_AUTH" in spec.env else "[defaults]"
        open_by_key.setdefault(f"{table}.INBOUND_AUTH", []).append(name)
    return [
        Problem(
            key,
            f'is "off" for {", ".join(names)}: deployed to AWS, its functions would take any caller\'s messages '
            "and show every session to any caller (no peer token checked, sessions without an owner)",
            'remove it (the default, "required": peers present the tokens `flightdeck peers add` issues); for an '
            "isolated test rig only, synthesize with the CDK context -c allow_open_agents=true",
        )
        for key, names in open_by_key.items()
    ]


def _token_problems(deployment: DeploymentFile, caller: str, target: str, index: int) -> list[Problem]:
    """Locally: the token `caller` presents to `target` is one target's [peers] lists (else 401 or 403)."""
    peer = deployment.agents[target]
    # As outbound_tokens() gives it once `allow` names the target (a missing `allow` is its own problem).
    presented = deployment.agents[caller].peer_tokens.get(target) or peer.peers.get(caller)
    peers_key = toml_key(("agents", target, "peers"))
    if presented is None:
        try:
            example = new_token(caller)
        except PeerTokenError:
            example = "fdp_<peer id>_<secret>"
        return [
            Problem(
                peers_key,
                f'has no token for "{caller}", which delegates to {target} '
                f"({_delegate_key(caller, index)}): its tasks would be refused with 401",
                f'add {caller} = "{example}" under {peers_key} (LOCAL ONLY; any fdp_{caller}_<32+ characters>)',
            )
        ]
    if presented not in peer.peers.values():
        return [
            Problem(
                toml_key(("agents", caller, "peer_tokens", target)),
                f"is not a token {peers_key} lists: {target} would refuse {caller}'s tasks with 403",
                f"remove it ({caller}'s token for {target} is taken from {peers_key})",
            )
        ]
    return []


def load_checked(
    path: str | Path,
    runtime: Runtime,
    *,
    local_model: bool = False,
    aws_credentials: bool = False,
    allow_open_agents: bool = False,
) -> DeploymentFile:
    """`load` and `check`: the one check of a whole file at start (local up, demo, bench, app.py)."""
    return check(
        load(path),
        path,
        runtime,
        local_model=local_model,
        aws_credentials=aws_credentials,
        allow_open_agents=allow_open_agents,
    )
