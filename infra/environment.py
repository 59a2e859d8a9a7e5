"""The Lambda environment of one agent, built from the deployment file.

Plain Python (no CDK types): the stack passes the resource names/URLs/ARNs in,
which are CloudFormation tokens at synth time. The result is validated with the
same `flightdeck.settings.Settings` the functions use at cold start, so a
malformed setting fails `cdk synth`, not the first invocation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from flightdeck.config_file import AgentSpec, DeploymentFile
from flightdeck.domain.allowlist import Allowlist
from flightdeck.settings import Settings, SettingsError

METRICS_NAMESPACE = "Flightdeck"

# Names, URLs and ARNs of this stack's resources: only the stack sets them.
RESOURCE_VARIABLES = (
    "STATE_TABLE",
    "TURNS_QUEUE_URL",
    "DISPATCH_QUEUE_URL",
    "DELIVERY_QUEUE_URL",
    "DELIVERY_DLQ_URL",
    "TIMERS_QUEUE_URL",
    "TOOL_CALLBACK_SECRET_ARN",
    "PEER_TOKENS_SECRET_ARN",
)
MANAGED_VARIABLES = RESOURCE_VARIABLES + (
    "AGENT_NAME",
    "AGENT_DESCRIPTION",
    "AGENT_CONFIG",
    "ALLOWED_HOST_MAPPING",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
)
# Plain-text secrets are for `flightdeck local` only; on AWS they live in Secrets Manager.
LOCAL_ONLY_VARIABLES = ("TOOL_CALLBACK_SECRET", "TOOL_CALLBACK_SECRET_PREVIOUS", "PEER_TOKENS")

# Lambda's limit on the whole environment (keys + values).
LAMBDA_ENV_LIMIT_BYTES = 4096
# Upper estimate of what a token (queue URL, table name, secret ARN) resolves to.
_TOKEN_ESTIMATE = 160


@dataclass(frozen=True)
class HostMapping:
    value: str  # ALLOWED_HOST_MAPPING
    missing: tuple[str, ...]  # allowed agents whose URL is not known yet


def host_mapping(spec: AgentSpec) -> HostMapping:
    """ALLOWED_HOST_MAPPING on AWS: `allowed_hosts` plus `allow` resolved through deploy.peer_urls.

    A peer whose URL is not known yet (not deployed, or its URL not copied into
    peer_urls) is left out (fail closed: calls to it are refused) and reported.
    """
    urls = spec.deploy.peer_urls
    missing = tuple(n for n in spec.allow if n not in spec.allowed_hosts and n not in urls)
    known = spec.model_copy(update={"allow": [n for n in spec.allow if n not in missing]})
    value = known.host_mapping(urls)
    Allowlist.parse(value)  # a malformed peer URL fails synth, naming the entry
    return HostMapping(value=value, missing=missing)


@dataclass
class AgentEnvironment:
    variables: dict[str, str]
    settings: Settings
    host_mapping: HostMapping
    warnings: list[str] = field(default_factory=list)

    def estimated_size(self) -> int:
        return sum(
            len(k) + (_TOKEN_ESTIMATE if "${Token[" in v else len(v.encode())) for k, v in self.variables.items()
        )


def agent_environment(deployment: DeploymentFile, agent: str, resources: Mapping[str, str]) -> AgentEnvironment:
    """Every variable of flightdeck.settings for one agent's functions.

    Order of precedence: the stack's own values (resources, agent identity, allowlist)
    over the agent's [env] over the file's [defaults].
    """
    spec = deployment.agents[agent]
    if set(resources) != set(RESOURCE_VARIABLES):
        raise ValueError(f"resources must be exactly {RESOURCE_VARIABLES}, got {sorted(resources)}")
    warnings: list[str] = []
    configured = deployment.environment(agent)
    for name in LOCAL_ONLY_VARIABLES:
        if name in configured:
            where = ("the tokens live in Secrets Manager (PEER_TOKENS_SECRET_ARN)" if name == "PEER_TOKENS"
                     else "the key is generated in Secrets Manager (TOOL_CALLBACK_SECRET_ARN)")
            warnings.append(f"{name} is set in the deployment file but is not passed to Lambda: on AWS {where}")
    overridden = sorted(set(configured) & set(MANAGED_VARIABLES))
    if overridden:
        warnings.append(f"ignored in the deployment file (set by the stack): {', '.join(overridden)}")

    mapping = host_mapping(spec)
    for peer in mapping.missing:
        warnings.append(
            f"agent {agent!r} allows {peer!r} but its URL is unknown: {peer!r} is left out of "
            f"ALLOWED_HOST_MAPPING until [agents.{agent}.deploy.peer_urls] has {peer} = \"<its ApiUrl output>\" "
            "and this stack is deployed again"
        )
    allowed = set(spec.allow) | set(spec.allowed_hosts)
    for delegate in spec.delegates:
        if delegate.peer_service not in allowed:
            warnings.append(
                f"tool {delegate.name!r} delegates to service {delegate.peer_service!r}, which is neither in "
                f"allow nor in allowed_hosts of agent {agent!r}: its dispatches will be refused"
            )

    variables = {k: v for k, v in configured.items() if k not in LOCAL_ONLY_VARIABLES}
    variables.update(resources)
    variables.update(
        {
            "AGENT_NAME": spec.name,
            "AGENT_DESCRIPTION": spec.description,
            "AGENT_CONFIG": spec.agent_config_json(),
            "ALLOWED_HOST_MAPPING": mapping.value,
            "POWERTOOLS_SERVICE_NAME": spec.name,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        }
    )
    try:
        settings = Settings.from_env(variables)
    except SettingsError as exc:
        raise ValueError(f"agent {agent!r}: {exc}") from None
    env = AgentEnvironment(variables=variables, settings=settings, host_mapping=mapping, warnings=warnings)
    if env.estimated_size() > LAMBDA_ENV_LIMIT_BYTES:
        raise ValueError(
            f"agent {agent!r}: the Lambda environment would be about {env.estimated_size()} bytes, over Lambda's "
            f"{LAMBDA_ENV_LIMIT_BYTES}-byte limit (AGENT_CONFIG alone is {len(variables['AGENT_CONFIG'])}): "
            "shorten the system prompt or descriptions"
        )
    return env
