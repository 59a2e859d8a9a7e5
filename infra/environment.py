"""The Lambda environment of one agent, built from the deployment file.

Plain Python (no CDK types): the stack passes the resource names/URLs/ARNs in,
which are CloudFormation tokens at synth time. The result is validated with the
same `flightdeck.settings.Settings` the functions use at cold start, so a
malformed setting fails `cdk synth`, not the first invocation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from flightdeck.config_models import AgentSpec, DeploymentFile
from flightdeck.domain.allowlist import Allowlist
from flightdeck.settings import (
    LOCAL_ONLY_VARIABLES,
    RESOURCE_VARIABLES,
    Settings,
    SettingsError,
    pack_agent_config,
)

METRICS_NAMESPACE = "Flightdeck"

# RESOURCE_VARIABLES (only the stack sets them) and LOCAL_ONLY_VARIABLES: flightdeck.settings.
MANAGED_VARIABLES = RESOURCE_VARIABLES + (
    "AGENT_NAME",
    "AGENT_DESCRIPTION",
    "AGENT_CONFIG",
    "ALLOWED_HOST_MAPPING",
    "DISCOVERED_PEERS",
    "PEER_URL_PARAMETER_PREFIX",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "STREAMING",
    "CONSOLE",
)

# Lambda takes a synchronous event of at most 6,291,456 bytes: API Gateway's proxy event holds the body
# as a JSON string next to headers and the request context. Escaping can triple a body's size in that
# string (a 4-byte UTF-8 character written as a 12-byte escaped surrogate pair such as \\ud83d\\ude00), so only bodies up to a third
# of the limit, less the envelope, surely reach the function and its own 413. Larger bodies (up to API
# Gateway's fixed 10 MB) get a 413 from API Gateway itself, whose body AWS does not document (reported as
# {"message": "Request Too Long"}, not reshaped by gateway responses): docs/DEPLOYMENT.md, "Invoke it".
LAMBDA_SYNC_EVENT_LIMIT_BYTES = 6_291_456
MAX_BODY_BYTES_ON_AWS = 2_000_000

# Lambda's limit on the whole environment (keys + values).
LAMBDA_ENV_LIMIT_BYTES = 4096
# Upper estimate of what a token (queue URL, table name, secret ARN) resolves to.
_TOKEN_ESTIMATE = 160


@dataclass(frozen=True)
class HostMapping:
    value: str  # ALLOWED_HOST_MAPPING: the allowed services with a configured URL
    discovered: tuple[str, ...]  # DISCOVERED_PEERS: agents of the file whose URL is looked up at run time
    missing: tuple[str, ...]  # allowed names with no URL and not in the file: refused until configured


def host_mapping(spec: AgentSpec, file_agents: Collection[str]) -> HostMapping:
    """How each allowed name of an agent resolves on AWS.

    A URL in the file wins (`allowed_hosts`, then `deploy.peer_urls`): it goes into
    ALLOWED_HOST_MAPPING. Any other allowed agent of the same file is discovered at run
    time from the SSM parameter its stack publishes (flightdeck.adapters.peer_directory),
    so one `cdk deploy --all` wires the file's agents together, in any order. A name that
    is neither is left out (fail closed: calls to it are refused) and reported.
    """
    urls = spec.deploy.peer_urls
    configured = [n for n in spec.allow if n in spec.allowed_hosts or n in urls]
    discovered = tuple(n for n in spec.allow if n not in configured and n in file_agents)
    missing = tuple(n for n in spec.allow if n not in configured and n not in file_agents)
    known = spec.model_copy(update={"allow": configured})
    value = known.host_mapping(urls)
    Allowlist.parse(value)  # a malformed peer URL fails synth, naming the entry
    return HostMapping(value=value, discovered=discovered, missing=missing)


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


def agent_environment(
    deployment: DeploymentFile,
    agent: str,
    resources: Mapping[str, str],
    *,
    peer_url_prefix: str,
    public_base_url: str = "",
) -> AgentEnvironment:
    """Every variable of flightdeck.settings for one agent's functions.

    peer_url_prefix: where the agents of this deployment publish their URLs (PEER_URL_PARAMETER_PREFIX).
    public_base_url: the deployed API's URL, PUBLIC_BASE_URL unless the file sets one (a custom domain): the
    agent card's url and the A2A push URL name it, never a request's Host header.

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
            where = (
                "the tokens live in Secrets Manager (PEER_TOKENS_SECRET_ARN)"
                if name == "PEER_TOKENS"
                else "the key is generated in Secrets Manager (TOOL_CALLBACK_SECRET_ARN)"
            )
            warnings.append(f"{name} is set in the deployment file but is not passed to Lambda: on AWS {where}")
    overridden = sorted(set(configured) & set(MANAGED_VARIABLES))
    if overridden:
        warnings.append(f"ignored in the deployment file (set by the stack): {', '.join(overridden)}")

    mapping = host_mapping(spec, deployment.agents)
    for peer in mapping.missing:
        warnings.append(
            f"agent {agent!r} allows {peer!r}, which is no agent of this file and has no URL: calls to it are "
            f'refused until [agents.{agent}] has allowed_hosts = {{ {peer} = "https://..." }} (or '
            f"deploy.peer_urls.{peer}) and this stack is deployed again"
        )
    allowed = set(spec.allow) | set(spec.allowed_hosts)
    for delegate in spec.delegates:
        if delegate.peer_service not in allowed:
            warnings.append(
                f"tool {delegate.name!r} delegates to service {delegate.peer_service!r}, which is neither in "
                f"allow nor in allowed_hosts of agent {agent!r}: its dispatches will be refused"
            )

    variables = {k: v for k, v in configured.items() if k not in LOCAL_ONLY_VARIABLES}
    if public_base_url and not variables.get("PUBLIC_BASE_URL"):
        variables["PUBLIC_BASE_URL"] = public_base_url
    variables.update(resources)
    variables.update(
        {
            "AGENT_NAME": spec.name,
            "AGENT_DESCRIPTION": spec.description,
            "AGENT_CONFIG": _agent_config(spec.agent_config_json()),
            "ALLOWED_HOST_MAPPING": mapping.value,
            "DISCOVERED_PEERS": ",".join(mapping.discovered),
            "PEER_URL_PARAMETER_PREFIX": peer_url_prefix,
            "POWERTOOLS_SERVICE_NAME": spec.name,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            # The stack serves the streaming routes through STREAM integrations and the Lambda Web Adapter
            # (infra/api.py, infra/functions.py): the card may say so.
            "STREAMING": "on",
            # The console's routes exist only where its page is served (infra/console.py).
            "CONSOLE": "on" if spec.deploy.console else "off",
        }
    )
    try:
        settings = Settings.from_env(variables)
    except SettingsError as exc:
        raise ValueError(f"agent {agent!r}: {exc}") from None
    if settings.max_body_bytes > MAX_BODY_BYTES_ON_AWS:
        raise ValueError(
            f"agent {agent!r}: MAX_BODY_BYTES={settings.max_body_bytes} is over {MAX_BODY_BYTES_ON_AWS}: a body that "
            f"large may not fit Lambda's {LAMBDA_SYNC_EVENT_LIMIT_BYTES}-byte event, so the function could not "
            "answer its 413 (API Gateway would, in its own shape)"
        )
    env = AgentEnvironment(variables=variables, settings=settings, host_mapping=mapping, warnings=warnings)
    if env.estimated_size() > LAMBDA_ENV_LIMIT_BYTES:
        raise ValueError(
            f"agent {agent!r}: the Lambda environment would be about {env.estimated_size()} bytes, over Lambda's "
            f"{LAMBDA_ENV_LIMIT_BYTES}-byte limit (AGENT_CONFIG alone is {len(variables['AGENT_CONFIG'])}): "
            "shorten the system prompt, descriptions or skill schemas"
        )
    return env


# Above this, the agent definition goes packed (flightdeck.settings.pack_agent_config): the environment is 4 KB.
AGENT_CONFIG_PACK_ABOVE = 1024


def _agent_config(config_json: str) -> str:
    packed = pack_agent_config(config_json)
    return packed if len(config_json) > AGENT_CONFIG_PACK_ABOVE and len(packed) < len(config_json) else config_json
