"""`flightdeck peers add|rotate|revoke|list`: manage who may call an agent, without a redeploy.

The agent's peer registry lives in its own DynamoDB table (flightdeck.adapters.peer_registry):
one item per peer with the SHA-256 of its token, never the token. `add` and `rotate` print
the new token once, on stdout alone (`TOKEN=$(flightdeck peers add ...)`); hand it to the
peer's operator over a channel you trust. Changes apply to the next request (the functions
read the registry on every call; nothing is cached).

Usage plans (flightdeck.domain.peer_usage): API Gateway meters each peer under its own API
key, named by the authorizer. `add` makes sure the peer has that key, enabled and in a usage
plan: a peer named in the configuration keeps the plan of its own; any other gets its key in
the agent's default plan (the default limits, per peer). `add` of a revoked peer re-enables
its key. `revoke` disables the key, so API Gateway refuses the peer at the edge at once, even
while an Allow of the authorizer is still cached. `rotate` leaves the key alone (it is per
peer, not per token). `list` shows each peer's key: enabled, disabled or missing.

Which table: --table; else, with --endpoint-url (the local moto server of `flightdeck local up`),
the local name `<agent>-state`; else the `StateTableName` output of the agent's CloudFormation
stack `Flightdeck-<agent>` (credentials and region from the usual AWS configuration).
Which default usage plan (`add`): --usage-plan-id; else, with --endpoint-url, the plan named
`flightdeck-<agent>-peers` in the local API Gateway; else the `PeerUsagePlanId` output of the
stack. `add` finds the table and the plan before it changes anything: if either is missing it
fails (exit 1) with the registry and the keys as they were.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flightdeck import topology

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
# infra/stack.py stack_name(): the CloudFormation stack of an agent.
STACK_NAME = "Flightdeck-{agent}"
TABLE_OUTPUT = "StateTableName"
PLAN_OUTPUT = "PeerUsagePlanId"
LOCAL_REGION = "us-east-1"


class AdminError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.code = code


def _say(message: str) -> None:
    print(f"flightdeck: {message}", file=sys.stderr, flush=True)


# What boto3 reads (AWS_REGION is the Lambda runtime's; boto3 ignores it).
REGION_HELP = (
    "pass --region, set AWS_DEFAULT_REGION, or use a profile that has one "
    "(AWS_PROFILE=NAME; `aws configure set region eu-west-1 --profile NAME`)"
)
CREDENTIALS_HELP = (
    "provide AWS credentials as for the AWS CLI: `aws configure` (access keys), "
    "`aws sso login --profile NAME` with AWS_PROFILE=NAME, or AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) in the environment; for the local stack of "
    "`flightdeck local up`, pass --endpoint-url instead"
)
# Error codes that mean "these credentials were refused", not "you may not".
_REFUSED_CREDENTIALS = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "MissingAuthenticationToken",
        "InvalidAccessKeyId",
        "RequestExpired",
    }
)


def credentials_problem(exc: BaseException) -> str | None:
    """A sentence saying how to provide credentials, if exc is about missing or refused ones."""
    from botocore.exceptions import ClientError, CredentialRetrievalError, NoCredentialsError, PartialCredentialsError

    try:
        from botocore.exceptions import SSOError, TokenRetrievalError
    except ImportError:  # older botocore
        # The stubs always have both names; only an older botocore at run time lacks them.
        SSOError = TokenRetrievalError = NoCredentialsError  # type: ignore[misc, assignment]  # noqa: N806

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return f"no AWS credentials ({exc}): {CREDENTIALS_HELP}"
    if isinstance(exc, (CredentialRetrievalError, SSOError, TokenRetrievalError)):
        return f"the AWS credentials could not be obtained ({exc}): {CREDENTIALS_HELP}"
    if isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") in _REFUSED_CREDENTIALS:
        return f"AWS refused the credentials ({exc.response['Error'].get('Message', exc)}): {CREDENTIALS_HELP}"
    return None


def _session(args: argparse.Namespace) -> Any:
    import boto3

    session = boto3.Session(region_name=args.region or None)
    if args.endpoint_url and session.get_credentials() is None:
        # A local moto server accepts any credentials.
        session = boto3.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=args.region or LOCAL_REGION
        )
    if session.region_name is None:
        session = boto3.Session(region_name=LOCAL_REGION if args.endpoint_url else None)
        if session.region_name is None:
            raise AdminError(f"no AWS region: {REGION_HELP}", EXIT_USAGE)
    if not args.endpoint_url:
        from botocore.exceptions import BotoCoreError

        try:
            found = session.get_credentials()
        except BotoCoreError as exc:
            raise AdminError(credentials_problem(exc) or f"cannot read AWS credentials: {exc}", EXIT_USAGE) from None
        if found is None:
            raise AdminError(f"no AWS credentials: {CREDENTIALS_HELP}", EXIT_USAGE)
    return session


class _Stack:
    """The outputs of the agent's CloudFormation stack, described once and only if needed."""

    def __init__(self, args: argparse.Namespace, session: Any):
        self.agent = args.agent
        self.name = STACK_NAME.format(agent=args.agent)
        self.session = session
        self._outputs: dict[str, str] | None = None

    def on_lean_door(self) -> bool:
        """Whether the agent's stack is on the lean front door (docs/FRONT_DOORS.md): it publishes PeerUrls and has
        no usage plan."""
        self.output(TABLE_OUTPUT, "table", "--table")  # described once; an AdminError when it cannot be
        outputs = self._outputs or {}
        return "PeerUrls" in outputs and PLAN_OUTPUT not in outputs

    def output(self, key: str, what: str, option: str) -> str:
        if self._outputs is None:
            try:
                described = self.session.client("cloudformation").describe_stacks(StackName=self.name)["Stacks"][0]
            except Exception as exc:  # noqa: BLE001 - botocore raises several kinds; all mean "cannot tell"
                about_credentials = credentials_problem(exc)
                if about_credentials:  # --table would not help: every later call needs them too
                    raise AdminError(about_credentials, EXIT_USAGE) from None
                raise AdminError(
                    f"cannot find the {what} of agent {self.agent!r}: stack {self.name}: {exc}; pass {option}"
                ) from None
            self._outputs = {str(o.get("OutputKey")): str(o.get("OutputValue")) for o in described.get("Outputs", [])}
        if key not in self._outputs:
            raise AdminError(f"stack {self.name} has no {key} output; pass {option}")
        return self._outputs[key]


def _table(args: argparse.Namespace, stack: _Stack) -> str:
    if args.table:
        return str(args.table)
    if args.endpoint_url:
        return topology.table_name(args.agent)
    return stack.output(TABLE_OUTPUT, "table", "--table")


def registry_for(args: argparse.Namespace, session: Any = None, stack: _Stack | None = None) -> Any:
    from flightdeck.adapters.peer_registry import PeerRegistry

    session = session or _session(args)
    client = session.client("dynamodb", endpoint_url=args.endpoint_url or None)
    return PeerRegistry(_table(args, stack or _Stack(args, session)), client)


def usage_plans_for(args: argparse.Namespace, session: Any) -> Any:
    from flightdeck.adapters.usage_plans import UsagePlans

    return UsagePlans(session.client("apigateway", endpoint_url=args.endpoint_url or None))


@dataclass(frozen=True)
class _Plan:
    id: str
    name: str


def _default_plan(args: argparse.Namespace, plans: Any, stack: _Stack) -> _Plan:
    """The usage plan a peer without one gets its key in; checked to exist (AdminError if not)."""
    from botocore.exceptions import ClientError

    from flightdeck.adapters.usage_plans import UsagePlanNotFoundError
    from flightdeck.domain.peer_usage import default_plan_name

    if not args.usage_plan_id and args.endpoint_url:
        name = default_plan_name(args.agent)
        try:
            return _Plan(plans.plan_id(name), name)
        except UsagePlanNotFoundError:
            raise AdminError(
                f"no usage plan named {name!r} at {args.endpoint_url} (is `flightdeck local up` running "
                f"agent {args.agent!r}?); pass --usage-plan-id"
            ) from None
    if args.usage_plan_id:
        plan_id, source = args.usage_plan_id, "--usage-plan-id"
    else:
        plan_id, source = stack.output(PLAN_OUTPUT, "usage plan", "--usage-plan-id"), f"{stack.name} {PLAN_OUTPUT}"
    try:
        plan = plans.client.get_usage_plan(usagePlanId=plan_id)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NotFoundException":
            raise AdminError(f"no usage plan {plan_id!r} (from {source})") from None
        raise
    return _Plan(str(plan["id"]), str(plan.get("name") or plan_id))


def _plans_of_key(plans: Any, key_id: str) -> list[_Plan]:
    items = plans.client.get_usage_plans(keyId=key_id).get("items", [])
    return [_Plan(str(p["id"]), str(p.get("name") or p["id"])) for p in items]


def _add(args: argparse.Namespace, session: Any, stack: _Stack) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    from flightdeck.adapters.peer_registry import PeerExistsError
    from flightdeck.domain.peers import check_channels, new_token

    channels = check_channels(args.channel or ["a2a"])
    # Everything that can be missing is found first: a failure here changes nothing.
    registry = registry_for(args, session, stack)
    if not args.endpoint_url and not args.usage_plan_id and not args.table and stack.on_lean_door():
        _add_token_only(args, registry, channels)
        return
    plans = usage_plans_for(args, session)
    default = _default_plan(args, plans, stack)
    existing = registry.get_peer(args.peer_id)
    if existing is not None and existing.status != "revoked":
        raise PeerExistsError(args.peer_id)
    # The key before the token: a token is never handed out that API Gateway would refuse for want
    # of a key. A key without a token in the registry lets nobody in.
    key_id = plans.ensure_peer_key(args.agent, args.peer_id, default.id)
    token = new_token(args.peer_id)
    registry.add(args.peer_id, token, channels=channels)
    print(token, flush=True)
    _say(
        f"peer {args.peer_id!r} may now call {args.agent!r} on {' and '.join(channels)} with the token above; "
        "it is shown only once (the table keeps its SHA-256)"
    )
    try:
        metered = _plans_of_key(plans, key_id)
    except (BotoCoreError, ClientError) as exc:
        _say(f"its usage key is enabled; cannot tell its usage plan: {exc}")
        return
    if not metered:  # only if its plan was deleted meanwhile: ensure_peer_key just put it in one
        _say(f"warning: the usage key of peer {args.peer_id!r} is in no usage plan: its calls will be refused (403)")
    elif any(p.id == default.id for p in metered):
        _say(
            f"peer {args.peer_id!r} is metered under usage plan {default.name} ({default.id}): the agent's "
            "default limits, for this peer alone"
        )
    else:
        names = ", ".join(f"{p.name} ({p.id})" for p in metered)
        _say(f"peer {args.peer_id!r} keeps its usage plan {names}")


def _add_token_only(args: argparse.Namespace, registry: Any, channels: Any) -> None:
    """`peers add` for an agent on the lean front door: no gateway meters its peers, so no usage key."""
    from flightdeck.adapters.peer_registry import PeerExistsError
    from flightdeck.domain.peers import new_token

    existing = registry.get_peer(args.peer_id)
    if existing is not None and existing.status != "revoked":
        raise PeerExistsError(args.peer_id)
    token = new_token(args.peer_id)
    registry.add(args.peer_id, token, channels=channels)
    print(token, flush=True)
    _say(
        f"peer {args.peer_id!r} may now call {args.agent!r} on {' and '.join(channels)} with the token above; "
        "it is shown only once (the table keeps its SHA-256). The agent is on the lean front door: no usage plan "
        "meters its peers (docs/FRONT_DOORS.md)"
    )


def _revoke(args: argparse.Namespace, session: Any, stack: _Stack) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    registry = registry_for(args, session, stack)
    registry.revoke(args.peer_id)
    _say(f"peer {args.peer_id!r} is revoked: its calls to {args.agent!r} are refused (403) from now on")
    try:
        disabled = usage_plans_for(args, session).disable_peer_key(args.agent, args.peer_id)
    except (BotoCoreError, ClientError) as exc:
        _say(
            f"but its usage key could not be disabled ({exc}): until it is, API Gateway may still let the peer "
            "through while an authorizer answer is cached (the functions refuse it regardless); run revoke again"
        )
        return EXIT_FAILURE
    if disabled:
        _say("its usage key is disabled: API Gateway refuses it at the edge, even with a cached authorizer answer")
    else:
        _say(f"peer {args.peer_id!r} had no usage key (nothing to disable)")
    return EXIT_OK


def _key_states(args: argparse.Namespace, session: Any, peer_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each peer's usage key: {"state": enabled|disabled|missing, "plan": name or None}; {} if API Gateway won't say."""
    from botocore.exceptions import BotoCoreError, ClientError

    from flightdeck.domain.peer_usage import usage_key

    if not peer_ids:
        return {}
    plans = usage_plans_for(args, session)
    try:
        names = {}
        for page in plans.client.get_paginator("get_usage_plans").paginate():
            names.update({str(p["id"]): str(p.get("name") or p["id"]) for p in page.get("items", [])})
        states = {}
        for peer_id in peer_ids:
            found = plans.lookup(usage_key(args.agent, peer_id))
            if found is None:
                states[peer_id] = {"state": "missing", "plan": None}
            else:
                states[peer_id] = {
                    "state": "enabled" if found.enabled else "disabled",
                    "plan": names.get(found.plan_id, found.plan_id) if found.plan_id else None,
                }
        return states
    except (BotoCoreError, ClientError) as exc:
        _say(f"cannot read the usage keys ({exc}): listing the registry only")
        return {}


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds") if ms else "-"


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from flightdeck.adapters.peer_registry import PeerExistsError, PeerNotFoundError
    from flightdeck.domain.peers import PeerTokenError, check_peer_id, new_token

    try:
        if args.action in ("add", "rotate", "revoke"):
            check_peer_id(args.peer_id)
        if getattr(args, "grace_seconds", 0) < 0:
            raise AdminError("--grace-seconds must be 0 or more", EXIT_USAGE)
        session = _session(args)
        stack = _Stack(args, session)
        if args.action == "add":
            _add(args, session, stack)
        elif args.action == "rotate":
            token = new_token(args.peer_id)
            record = registry_for(args, session, stack).rotate(args.peer_id, token, grace_ms=args.grace_seconds * 1000)
            print(token, flush=True)
            grace = (
                f"the previous token stays valid until {_when(record.previous_valid_until)}"
                if args.grace_seconds
                else "the previous token is refused from now on"
            )
            _say(f"peer {args.peer_id!r} has a new token (shown above, only once); {grace}")
        elif args.action == "revoke":
            return _revoke(args, session, stack)
        else:
            records = registry_for(args, session, stack).list_peers()
            keys = _key_states(args, session, [r.peer_id for r in records])
            unknown = {"state": "unknown", "plan": None}
            if args.json:
                print(
                    json.dumps(
                        [
                            {
                                "peer_id": r.peer_id,
                                "status": r.status,
                                "channels": list(r.channels),
                                "created_at": r.created_at,
                                "rotated_at": r.rotated_at,
                                "revoked_at": r.revoked_at,
                                "previous_valid_until": r.previous_valid_until,
                                "usage_key": keys.get(r.peer_id, unknown),
                            }
                            for r in records
                        ],
                        indent=2,
                    )
                )
            else:
                print(
                    f"{'PEER':<24} {'STATUS':<8} {'CHANNELS':<10} {'CREATED':<26} {'ROTATED':<26} {'PREVIOUS TOKEN VALID UNTIL':<26} "
                    "USAGE KEY (PLAN)"
                )
                for r in records:
                    key = keys.get(r.peer_id, unknown)
                    plan = f" ({key['plan']})" if key["plan"] else ""
                    print(
                        f"{r.peer_id:<24} {r.status:<8} {','.join(r.channels):<10} {_when(r.created_at):<26} {_when(r.rotated_at):<26} "
                        f"{_when(r.previous_valid_until):<26} {key['state']}{plan}"
                    )
        return EXIT_OK
    except PeerTokenError as exc:
        _say(str(exc))
        return EXIT_USAGE
    except PeerExistsError:
        _say(f"peer {args.peer_id!r} is already registered and active: rotate or revoke it")
        return EXIT_FAILURE
    except PeerNotFoundError as exc:
        _say(str(exc))
        return EXIT_FAILURE
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


def add_peers_command(commands: Any) -> Any:
    """The `flightdeck peers` parser; returns its subcommands, for the commands of other modules (discover, sync)."""
    peers = commands.add_parser(
        "peers",
        help="add, rotate, revoke or list the peers that may call an agent (no redeploy)",
        description="Manage an agent's peer registry: the peers allowed to call POST /api/chat, POST /a2a and "
        "GET /api/sessions/{id}, each with its own bearer token fdp_<peer_id>_<secret>. The table stores only "
        "each token's SHA-256. Each peer is also metered by API Gateway under its own API key in a usage plan: "
        "`add` gives it one (in the agent's default plan unless it has a plan of its own), `revoke` disables it. "
        "Works against the local moto server (--endpoint-url) and, with credentials, AWS.",
        epilog="examples:\n"
        "  flightdeck peers add --agent worker orchestrator --endpoint-url http://127.0.0.1:5000\n"
        "  flightdeck peers add --agent worker partner --usage-plan-id abc123\n"
        "  flightdeck peers add --agent worker claude-desktop --channel mcp   # an MCP client's key\n"
        "  flightdeck peers add --agent orchestrator user --channel user      # you: curl, chat, the console\n"
        "  flightdeck peers rotate --agent worker orchestrator --grace-seconds 3600\n"
        "  flightdeck peers revoke --agent worker orchestrator\n"
        "  flightdeck peers list --agent worker\n"
        "  flightdeck peers discover https://partner.example --config agents.toml --agent orchestrator\n"
        "\n"
        "On AWS the table and the default usage plan are the StateTableName and PeerUsagePlanId outputs of the\n"
        "stack Flightdeck-<agent>; `add` finds both before it changes anything.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    peers.set_defaults(parser=peers)
    actions = peers.add_subparsers(title="commands", metavar="COMMAND")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--agent", required=True, help="the agent whose callers these are")
        sub.add_argument(
            "--table",
            help="its DynamoDB table (default: <agent>-state with --endpoint-url, "
            "else the StateTableName output of stack Flightdeck-<agent>)",
        )
        sub.add_argument(
            "--endpoint-url",
            help="endpoint of DynamoDB and API Gateway: the local moto server of "
            "`flightdeck local up`, e.g. http://127.0.0.1:5000",
        )
        sub.add_argument("--region", help="AWS region (default: from the AWS configuration)")

    add = actions.add_parser("add", help="register a peer, give it a usage key and print its new token (once)")
    add.add_argument("peer_id", help="the peer's id: a-z 0-9 '-' (it is part of the token)")
    add.add_argument(
        "--channel",
        action="append",
        choices=["a2a", "mcp", "user"],
        help="what the token opens (its roles, docs/PEERS.md), repeatable: a2a (a peer agent's: POST /api/chat, "
        "/a2a, the sessions routes; the default), user (the agent's own user's: those, every skill, the console's "
        "routes) or mcp (POST /mcp: an MCP client's key); two: --channel a2a --channel mcp",
    )
    add.add_argument(
        "--usage-plan-id",
        metavar="ID",
        help="the usage plan for a peer that has none yet (default: flightdeck-<agent>-peers with "
        "--endpoint-url, else the PeerUsagePlanId output of stack Flightdeck-<agent>); a peer "
        "already in a plan, e.g. one of its own from the configuration, stays there",
    )
    rotate = actions.add_parser("rotate", help="give a peer a new token (printed once)")
    rotate.add_argument("peer_id")
    rotate.add_argument(
        "--grace-seconds",
        type=int,
        default=0,
        metavar="N",
        help="keep accepting the previous token for N seconds, so the peer can switch without "
        "a refused call (default 0: refused at once)",
    )
    revoke = actions.add_parser("revoke", help="refuse a peer from now on and disable its usage key")
    revoke.add_argument("peer_id")
    listing = actions.add_parser("list", help="every peer, its status, dates and usage key (never a token or hash)")
    listing.add_argument("--json", action="store_true", help="as JSON")
    for action, sub in (("add", add), ("rotate", rotate), ("revoke", revoke), ("list", listing)):
        common(sub)
        sub.set_defaults(run=run, action=action)
    return actions
