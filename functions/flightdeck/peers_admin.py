"""`flightdeck peers add|rotate|revoke|list`: manage who may call an agent, without a redeploy.

The agent's peer registry lives in its own DynamoDB table (flightdeck.adapters.peer_registry):
one item per peer with the SHA-256 of its token, never the token. `add` and `rotate` print
the new token once, on stdout alone (`TOKEN=$(flightdeck peers add ...)`); hand it to the
peer's operator over a channel you trust. Changes apply to the next request (the functions
read the registry on every call; nothing is cached).

Which table: --table; else, with --endpoint-url (the local moto server of `flightdeck local up`),
the local name `<agent>-state`; else the `StateTableName` output of the agent's CloudFormation
stack `Flightdeck-<agent>` (credentials and region from the usual AWS configuration).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

from flightdeck import topology

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
# infra/stack.py stack_name(): the CloudFormation stack of an agent.
STACK_NAME = "Flightdeck-{agent}"
TABLE_OUTPUT = "StateTableName"
LOCAL_REGION = "us-east-1"


class AdminError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.code = code


def _say(message: str) -> None:
    print(f"flightdeck: {message}", file=sys.stderr, flush=True)


def _session(args: argparse.Namespace) -> Any:
    import boto3

    session = boto3.Session(region_name=args.region or None)
    if args.endpoint_url and session.get_credentials() is None:
        # A local moto server accepts any credentials.
        session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                region_name=args.region or LOCAL_REGION)
    if session.region_name is None:
        session = boto3.Session(region_name=LOCAL_REGION if args.endpoint_url else None)
        if session.region_name is None:
            raise AdminError("no AWS region: pass --region or set AWS_REGION", EXIT_USAGE)
    return session


def _table(args: argparse.Namespace, session: Any) -> str:
    if args.table:
        return args.table
    if args.endpoint_url:
        return topology.table_name(args.agent)
    stack = STACK_NAME.format(agent=args.agent)
    cloudformation = session.client("cloudformation")
    try:
        described = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    except Exception as exc:  # noqa: BLE001 - botocore raises several kinds; all mean "cannot tell"
        raise AdminError(f"cannot find the table of agent {args.agent!r}: stack {stack}: {exc}; pass --table") from None
    for output in described.get("Outputs", []):
        if output.get("OutputKey") == TABLE_OUTPUT:
            return str(output["OutputValue"])
    raise AdminError(f"stack {stack} has no {TABLE_OUTPUT} output; pass --table")


def registry_for(args: argparse.Namespace) -> Any:
    from flightdeck.adapters.peer_registry import PeerRegistry

    session = _session(args)
    client = session.client("dynamodb", endpoint_url=args.endpoint_url or None)
    return PeerRegistry(_table(args, session), client)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds") if ms else "-"


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from flightdeck.adapters.peer_registry import PeerExistsError, PeerNotFoundError
    from flightdeck.domain.peers import PeerTokenError, check_peer_id, new_token

    try:
        if args.action in ("add", "rotate", "revoke"):
            check_peer_id(args.peer_id)
        if getattr(args, "grace_seconds", 0) < 0:
            raise AdminError("--grace-seconds must be 0 or more", EXIT_USAGE)
        registry = registry_for(args)
        if args.action == "add":
            token = new_token(args.peer_id)
            registry.add(args.peer_id, token)
            print(token, flush=True)
            _say(f"peer {args.peer_id!r} may now call {args.agent!r} with the token above; it is shown only once "
                 "(the table keeps its SHA-256)")
        elif args.action == "rotate":
            token = new_token(args.peer_id)
            record = registry.rotate(args.peer_id, token, grace_ms=args.grace_seconds * 1000)
            print(token, flush=True)
            grace = (f"the previous token stays valid until {_when(record.previous_valid_until)}"
                     if args.grace_seconds else "the previous token is refused from now on")
            _say(f"peer {args.peer_id!r} has a new token (shown above, only once); {grace}")
        elif args.action == "revoke":
            registry.revoke(args.peer_id)
            _say(f"peer {args.peer_id!r} is revoked: its calls to {args.agent!r} are refused (403) from now on")
        else:
            records = registry.list_peers()
            if args.json:
                print(json.dumps([{"peer_id": r.peer_id, "status": r.status, "created_at": r.created_at,
                                   "rotated_at": r.rotated_at, "revoked_at": r.revoked_at,
                                   "previous_valid_until": r.previous_valid_until} for r in records], indent=2))
            else:
                print(f"{'PEER':<24} {'STATUS':<8} {'CREATED':<26} {'ROTATED':<26} PREVIOUS TOKEN VALID UNTIL")
                for r in records:
                    print(f"{r.peer_id:<24} {r.status:<8} {_when(r.created_at):<26} {_when(r.rotated_at):<26} "
                          f"{_when(r.previous_valid_until)}")
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
        _say(f"AWS call failed: {exc}")
        return EXIT_FAILURE


def add_peers_command(commands: Any) -> None:
    peers = commands.add_parser(
        "peers",
        help="add, rotate, revoke or list the peers that may call an agent (no redeploy)",
        description="Manage an agent's peer registry: the peers allowed to call POST /api/chat, POST /a2a and "
        "GET /api/sessions/{id}, each with its own bearer token fdp_<peer_id>_<secret>. The table stores only "
        "each token's SHA-256. Works against the local moto server (--endpoint-url) and, with credentials, AWS.",
        epilog="examples:\n"
        "  flightdeck peers add --agent worker orchestrator --endpoint-url http://127.0.0.1:5000\n"
        "  flightdeck peers rotate --agent worker orchestrator --grace-seconds 3600\n"
        "  flightdeck peers revoke --agent worker orchestrator\n"
        "  flightdeck peers list --agent worker",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    peers.set_defaults(parser=peers)
    actions = peers.add_subparsers(title="commands", metavar="COMMAND")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--agent", required=True, help="the agent whose callers these are")
        sub.add_argument("--table", help="its DynamoDB table (default: <agent>-state with --endpoint-url, "
                                         "else the StateTableName output of stack Flightdeck-<agent>)")
        sub.add_argument("--endpoint-url", help="DynamoDB endpoint, e.g. the local moto server of `flightdeck local up`")
        sub.add_argument("--region", help="AWS region (default: from the AWS configuration)")

    add = actions.add_parser("add", help="register a peer and print its new token (once)")
    add.add_argument("peer_id", help="the peer's id: a-z 0-9 '-' (it is part of the token)")
    rotate = actions.add_parser("rotate", help="give a peer a new token (printed once)")
    rotate.add_argument("peer_id")
    rotate.add_argument("--grace-seconds", type=int, default=0, metavar="N",
                        help="keep accepting the previous token for N seconds, so the peer can switch without "
                             "a refused call (default 0: refused at once)")
    revoke = actions.add_parser("revoke", help="refuse a peer from now on")
    revoke.add_argument("peer_id")
    listing = actions.add_parser("list", help="every peer, its status and dates (never a token or hash)")
    listing.add_argument("--json", action="store_true", help="as JSON")
    for action, sub in (("add", add), ("rotate", rotate), ("revoke", revoke), ("list", listing)):
        common(sub)
        sub.set_defaults(run=run, action=action)
