"""One agent's stack: composes one construct per capability, nothing else."""

from __future__ import annotations

from typing import Any

import jsii
from aws_cdk import Annotations, CfnOutput, IResolvable, IResolveContext, RemovalPolicy, Stack, Tags, Token
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from flightdeck import topology
from flightdeck.config_models import DeploymentFile

from .access import Permissions
from .alarms import AlarmTopic
from .api import AGENT_CARD_PATH, Api
from .bundling import BundleSettings, lambda_code
from .console import WebConsole
from .dashboard import OperationsDashboard, sessions_overdue_alarm
from .environment import agent_environment
from .functions import Functions
from .lean_door import LeanDoor, published_urls
from .queues import Queues
from .schedule import SweepSchedule
from .secret import CallbackSecret, PeerTokensSecret
from .state import StateTable
from .tracing import export_traces_to_xray, trace_settings
from .usage_plans import PeerUsagePlans


@jsii.implements(IResolvable)
class _Later:
    """A value the functions' environment names before its construct exists (the API's URL: the API is
    built from the functions), resolved at synthesis. (Lazy.string's producer cannot be written in
    Python: jsii fails to pass it its context.)"""

    def __init__(self, what: str) -> None:
        self.what = what
        self.value: str | None = None

    @property
    def creation_stack(self) -> list[str]:
        return []

    @property
    def type_hint(self) -> None:
        return None

    def resolve(self, context: IResolveContext) -> str:  # noqa: ARG002 - jsii signature
        if self.value is None:
            raise ValueError(f"{self.what} was never set")
        return self.value

    def to_string(self) -> str:
        return f"<{self.what}>"


def stack_name(agent: str) -> str:
    return f"Flightdeck-{agent}"


def resource_prefix(agent: str) -> str:
    """Prefix of the explicit (queue, alarm, invoked function) names: flightdeck-<agent>."""
    return f"flightdeck-{agent}"


class FlightdeckStack(Stack):
    """Flightdeck agent `agent` of `deployment`: API, usage plans, state, queues, alarm topic, functions, schedule,
    secrets, the SSM parameter with its URL, the operations dashboard."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        deployment: DeploymentFile,
        deployment_name: str,
        agent: str,
        bundle: BundleSettings,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("description", f"Flightdeck agent {agent}: asynchronous agent-to-agent delegation")
        super().__init__(scope, id, **kwargs)
        spec = deployment.agents[agent]
        retain = spec.deploy.retain_data
        prefix = resource_prefix(agent)
        peer_url_prefix = topology.peer_url_parameter_prefix(deployment_name)
        Tags.of(self).add("flightdeck:agent", agent)
        Tags.of(self).add("flightdeck:deployment", deployment_name)

        # Who starts owed thinks (flightdeck.settings THINK_START, checked with the rest of the environment below).
        streamed = deployment.environment(agent).get("THINK_START") == "stream"
        state = StateTable(
            self, "State", retain=retain, stream=streamed, deadline_projection=spec.deploy.deadline_index_projection
        )
        queues = Queues(self, "Queues", prefix=prefix, alarm_prefix=prefix)
        alarms = AlarmTopic(self, "Alarms", agent=agent, alarm_prefix=prefix, emails=spec.deploy.alarm_emails)
        for pair in queues.pairs.values():
            alarms.notify(pair.dlq_alarm)
            if pair.age_alarm is not None:
                alarms.notify(pair.age_alarm)
        secret = CallbackSecret(self, "CallbackSecret", agent=agent)
        peer_tokens = PeerTokensSecret(self, "PeerTokens", agent=agent)

        api_base_url = _Later("the API's base URL")
        env = agent_environment(
            deployment,
            agent,
            {
                "STATE_TABLE": state.table.table_name,
                # A plain name, not a reference: the turn worker starts thinks in itself (infra/functions.py).
                "TURN_WORKER_FUNCTION": topology.function_name(prefix, topology.THINK_HANDLER),
                "TURNS_QUEUE_URL": queues["turns"].queue.queue_url,
                "THINKS_QUEUE_URL": queues[topology.THINKS_QUEUE].queue.queue_url,
                "DISPATCH_QUEUE_URL": queues["dispatch"].queue.queue_url,
                "DELIVERY_QUEUE_URL": queues["delivery"].queue.queue_url,
                "DELIVERY_DLQ_URL": queues["delivery"].dlq.queue_url,
                "TIMERS_QUEUE_URL": queues["timers"].queue.queue_url,
                "TOOL_CALLBACK_SECRET_ARN": secret.secret.secret_arn,
                "PEER_TOKENS_SECRET_ARN": peer_tokens.secret.secret_arn,
            },
            peer_url_prefix=peer_url_prefix,
            public_base_url=Token.as_string(api_base_url),
        )
        for warning in env.warnings:
            Annotations.of(self).add_warning_v2("flightdeck:config", warning)
        if not bundle.deployable:
            Annotations.of(self).add_warning_v2(
                "flightdeck:asset",
                f"the Lambda asset is not deployable (bundleDeps={bundle.deps}, bundlePlatform={bundle.platform}): "
                "synthesize with dependencies for the Lambda platform before deploying",
            )

        functions = Functions(
            self,
            "Functions",
            agent=agent,
            prefix=prefix,
            code=lambda_code(bundle),
            environment=env.variables,
            memory_mb=spec.deploy.memory_mb,
            think_memory_mb=spec.deploy.think_memory_mb,
            log_removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )
        sample_ratio = trace_settings(self.node.try_get_context)
        if sample_ratio is not None:
            export_traces_to_xray(functions, sample_ratio)
        functions.consume(queues)
        functions.configure_async_invokes(queues)
        if streamed:
            functions.consume_stream(state.table, queues)
        Permissions(
            self,
            "Permissions",
            functions=functions,
            state=state,
            queues=queues,
            secret=secret,
            peer_tokens=peer_tokens,
            model=spec.model,
            peer_url_parameters=[topology.peer_url_parameter(peer_url_prefix, n) for n in env.host_mapping.discovered],
            mcp_secrets=[
                m.credential.removeprefix("secret:") for m in spec.mcp_servers if m.credential.startswith("secret:")
            ],
            turn_worker_name=topology.function_name(prefix, topology.THINK_HANDLER),
        )
        if spec.deploy.front_door == "lean":
            self._lean_door(deployment_name, agent, spec, functions, api_base_url, peer_url_prefix, retain)
        else:
            self._rest_door(deployment_name, agent, spec, functions, api_base_url, peer_url_prefix, retain)
        SweepSchedule(
            self,
            "Sweep",
            sweeper=functions["sweeper"],
            punctuate_interval_ms=env.settings.tool_agg_punctuate_interval_ms,
        )
        overdue = sessions_overdue_alarm(self, "SessionsOverdueAlarm", agent=agent, alarm_prefix=prefix)
        alarms.notify(overdue)
        dashboard = OperationsDashboard(
            self,
            "Operations",
            agent=agent,
            dashboard_name=prefix,
            functions=functions.functions,
            queues=queues,
            alarms=[pair.dlq_alarm for pair in queues.pairs.values()]
            + [pair.age_alarm for pair in queues.pairs.values() if pair.age_alarm is not None]
            + [overdue],
        )
        CfnOutput(
            self,
            "StateTableName",
            value=state.table.table_name,
            description="DynamoDB table of sessions, turns and the peer registry (flightdeck peers --table)",
        )
        CfnOutput(
            self,
            "CallbackSecretArn",
            value=secret.secret.secret_arn,
            description=(
                f"Secret holding the HMAC key {agent} signs callback tokens with: rotate it with "
                "`aws secretsmanager put-secret-value` (docs/DEPLOYMENT.md, Operate); the value is never output"
            ),
        )
        CfnOutput(
            self,
            "PeerTokensSecretArn",
            value=peer_tokens.secret.secret_arn,
            description=f"Secret holding the bearer tokens {agent} presents to its peers (JSON service -> token)",
        )
        CfnOutput(
            self,
            "DashboardUrl",
            value=dashboard.url,
            description=f"CloudWatch dashboard of {agent}: delegations, callbacks, queues, DLQs, function errors",
        )
        CfnOutput(
            self,
            "AlarmTopicArn",
            value=alarms.topic.topic_arn,
            description=(
                f"SNS topic the alarms of {agent} notify (ALARM and OK): subscribe with "
                "deploy.alarm_emails or `aws sns subscribe`"
            ),
        )
        self.functions = functions
        self.environment_variables = env.variables

    def _door_outputs(
        self,
        deployment_name: str,
        agent: str,
        peer_url_prefix: str,
        *,
        published: str,
        api_url: str,
        api_url_description: str,
        card_url: str,
    ) -> None:
        """What either front door publishes and outputs: its URL(s) for the peers (SSM), its base URL, its card."""
        self._published_url(deployment_name, agent, peer_url_prefix, published)
        CfnOutput(self, "ApiUrl", value=api_url, description=api_url_description)
        CfnOutput(self, "AgentCardUrl", value=card_url, description=f"A2A agent card of {agent}")

    def _published_url(self, deployment_name: str, agent: str, peer_url_prefix: str, value: str) -> None:
        """Where the other agents of this deployment find our URL(s) at run time (DISCOVERED_PEERS): a plain
        parameter with a fixed name, not an export, so no stack depends on another and any order deploys."""
        url_parameter = ssm.StringParameter(
            self,
            "ApiUrlParameter",
            parameter_name=topology.peer_url_parameter(peer_url_prefix, agent),
            string_value=value,
            description=f"Flightdeck {deployment_name}: base URL of agent {agent} (read by its peers at run time)",
        )
        CfnOutput(
            self,
            "ApiUrlParameterName",
            value=url_parameter.parameter_name,
            description=f"SSM parameter holding the base URL of {agent}",
        )

    def _lean_door(
        self,
        deployment_name: str,
        agent: str,
        spec: Any,
        functions: Functions,
        api_base_url: _Later,
        peer_url_prefix: str,
        retain: bool,
    ) -> None:
        door = LeanDoor(
            self,
            "LeanDoor",
            agent=agent,
            functions=functions.functions,
            throttle_rate=spec.deploy.throttle_rate,
            throttle_burst=spec.deploy.throttle_burst,
            url_function_concurrency=spec.deploy.url_function_concurrency,
            log_removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )
        api_base_url.value = door.base_url
        # The functions without a URL name ours (the card's JSON-RPC URL, the A2A push URL); a function with a
        # URL naming one would close a cycle (its URL depends on it), and none of them needs to.
        own = " ".join(f"{h}={u}" for h, u in door.urls.items() if h in ("a2a", "callback"))
        for handler, function in functions.functions.items():
            if handler not in topology.URL_HANDLERS:
                function.add_environment("PUBLIC_ENDPOINT_URLS", own)
        published = published_urls(door.base_url, door.urls)
        self._door_outputs(
            deployment_name,
            agent,
            peer_url_prefix,
            published=published,
            api_url=door.base_url + "/",
            api_url_description=f"The HTTP API of {agent}: the user's routes (docs/FRONT_DOORS.md); not the streaming ones",
            card_url=door.base_url + "/" + AGENT_CARD_PATH,
        )
        CfnOutput(
            self,
            "PeerUrls",
            value=published,
            description=(
                f"Where {agent} is reached, as its peers read it: the HTTP API, then each function URL by endpoint; "
                f"a peer elsewhere puts this whole value in its allowed_hosts.{agent} (or deploy.peer_urls)"
            ),
        )
        for handler, output in (
            ("chat_ingest", "ChatUrl"),
            ("callback", "CallbackUrl"),
            ("a2a", "A2aUrl"),
            ("session_events", "EventsUrl"),
        ):
            CfnOutput(
                self,
                output,
                value=door.urls[handler],
                description=f"Function URL of {agent}'s {handler} function (AuthType NONE: the function checks tokens)",
            )
        self.lean_door = door

    def _rest_door(
        self,
        deployment_name: str,
        agent: str,
        spec: Any,
        functions: Functions,
        api_base_url: _Later,
        peer_url_prefix: str,
        retain: bool,
    ) -> None:
        api = Api(
            self,
            "Api",
            agent=agent,
            functions=functions.functions,
            throttle_rate=spec.deploy.throttle_rate,
            throttle_burst=spec.deploy.throttle_burst,
            authorizer_cache_s=spec.gateway.authorizer_cache_s,
            log_removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            console=spec.deploy.console,
        )
        api_base_url.value = api.base_url
        if spec.deploy.console:
            WebConsole(self, "Console", rest_api=api.rest_api, request_validator=api.request_validator)
            CfnOutput(
                self,
                "ConsoleUrl",
                value=api.rest_api.url_for_path("/console"),
                description=f"The web console of {agent} (docs/CONSOLE.md): open it, enter a user token",
            )
        usage_plans = PeerUsagePlans(
            self, "PeerUsagePlans", agent=agent, rest_api=api.rest_api, stage=api.stage, plans=spec.usage_plans()
        )
        self._door_outputs(
            deployment_name,
            agent,
            peer_url_prefix,
            published=api.url,
            api_url=api.url,
            api_url_description=(
                f"Base URL of {agent}: the agents of this deployment find it in SSM; a peer elsewhere "
                f"puts it in its allowed_hosts.{agent}"
            ),
            card_url=api.agent_card_url,
        )
        CfnOutput(
            self,
            "PeerUsagePlanId",
            value=usage_plans.default_plan.usage_plan_id,
            description=(
                "Default per-peer usage plan: `flightdeck peers add` puts the API key of a peer added "
                "after deploy in it (the peers of the config file have their own plans)"
            ),
        )
        self.api = api
        self.usage_plans = usage_plans
