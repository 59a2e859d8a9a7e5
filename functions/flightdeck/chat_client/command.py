"""`flightdeck chat`: the subcommand, one message or a REPL."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from flightdeck.chat_client import DEFAULT_WAIT_S, TOKEN_ENV

if TYPE_CHECKING:
    from flightdeck.chat_client.transport import Console

# The client (requests, pydantic) is imported when the command runs: `flightdeck --help` stays fast.

HELP = (
    "/card prints the agent card, /raw the last raw JSON answer, /cancel cancels the session's work, /help this "
    "line; a line starting // sends it with one /; Ctrl-C stops waiting for an answer ({ctrl_c}); Ctrl-D exits"
)
COMMANDS = ("/card", "/raw", "/cancel", "/help")


class Conversation(Protocol):
    def say(self, text: str) -> int: ...

    def print_card(self) -> None: ...


def line_reader(prompt: str = "you> ") -> Callable[[], str]:
    """Lines from stdin: with a prompt and line editing on a terminal, plain lines from a pipe.
    Raises EOFError at the end (Ctrl-D)."""

    def read() -> str:
        stdin = sys.stdin
        if stdin.isatty():
            return input(prompt)
        line = stdin.readline()
        if not line:
            raise EOFError
        return line

    if sys.stdin.isatty():
        try:
            import readline  # noqa: F401 - input() gains line editing and history
        except ImportError:
            pass
    return read


def repl(conversation: Conversation, console: Console, read: Callable[[], str], ctrl_c: str) -> int:
    """Each line a message of the one conversation, until Ctrl-D; a fatal problem ends it with its code."""
    from flightdeck.chat_client.transport import EXIT_OK, Problem

    console.note("type a message; " + HELP.format(ctrl_c=ctrl_c))
    while True:
        try:
            text = read().strip()
        except EOFError:
            console.note("")
            return EXIT_OK
        except KeyboardInterrupt:
            console.note("\n(Ctrl-D exits)")
            continue
        if not text:
            continue
        try:
            if text == "/card":
                conversation.print_card()
            elif text in ("/help", "/?"):
                console.note(HELP.format(ctrl_c=ctrl_c))
            elif text == "/raw":
                raw = getattr(conversation, "last_raw", None)
                console.answer(json.dumps(raw, indent=2, ensure_ascii=False) if raw is not None else "(nothing yet)")
            elif text == "/cancel":
                cancel = getattr(conversation, "cancel", None)
                if cancel is None:
                    console.note("this conversation cannot cancel from here (Ctrl-C during a task cancels it)")
                else:
                    cancel()
            elif _is_command(text):  # a typo of a command would otherwise go to the model
                console.error(f"unknown command {text.split()[0]}: the commands are {', '.join(COMMANDS)}")
            else:
                conversation.say(text[1:] if text.startswith("//") else text)
        except KeyboardInterrupt:  # outside a task's own handling (printing an answer, /card)
            console.note("\n(interrupted; Ctrl-D exits)")
        except Problem as problem:
            console.error(problem.message)
            if problem.fatal:
                return problem.code


def _is_command(text: str) -> bool:
    """A line that looks like a command (/word): not a path such as /etc/hosts, nor //escaped."""
    head = text.split()[0]
    return head.startswith("/") and not head.startswith("//") and "/" not in head[1:]


def run(args: argparse.Namespace) -> int:
    import requests

    from flightdeck.chat_client.transport import EXIT_USAGE, Console, Polling, Problem

    console = Console()
    token = args.token or os.environ.get(TOKEN_ENV) or None
    polling = Polling(wait_s=args.wait)
    message = args.message
    if args.a2a:
        if args.message is not None:
            console.error("with --a2a CARD_URL, give at most one MESSAGE (no agent URL)")
            return EXIT_USAGE
        message = args.url
        if args.session:
            console.error("--session is for our agents; with --a2a, continue a conversation with --context ID")
            return EXIT_USAGE
    elif args.url is None:
        console.error("give the agent's URL (flightdeck chat URL [MESSAGE]), or --a2a CARD_URL for any A2A agent")
        return EXIT_USAGE
    elif args.context or args.task:
        console.error("--context and --task are for A2A agents (--a2a CARD_URL); for ours, use --session ID")
        return EXIT_USAGE
    if message is None and not sys.stdin.isatty():
        # Piped in, the whole input is one message (a file, a heredoc), not a message per line.
        message = sys.stdin.read().strip() or None
        if message is None and not (args.a2a and args.task):
            console.error("nothing on stdin: give a MESSAGE, or pipe one in")
            return EXIT_USAGE
    http = requests.Session()
    try:
        conversation: Any
        if args.a2a:
            from flightdeck.chat_client.a2a_chat import A2AChat

            conversation = A2AChat(args.a2a, token, console, polling, http, args.context, args.task)
            conversation.open()
            ctrl_c = "and cancels its task"
        else:
            from flightdeck.chat_client.sessions import SessionChat

            conversation = SessionChat(args.url, token, args.session, console, polling, http)
            ctrl_c = "the session keeps working"
        if not args.a2a and (message is None or args.session):
            conversation.check()  # the token (REPL), or the session joined: its history, whether it is busy
        if message is not None:
            status: int = conversation.say(message)
            return status
        if args.a2a and args.task:
            # Reattach to the task: its history, then its events; then the conversation goes on (a terminal).
            status = conversation.attach()
            if not sys.stdin.isatty():
                return status
        return repl(conversation, console, line_reader(), ctrl_c)
    except Problem as problem:
        console.error(problem.message)
        return problem.code
    finally:
        http.close()


class _IntermixedParser(argparse.ArgumentParser):
    """Options may come before, between and after URL and MESSAGE (`chat URL --token T MESSAGE`).

    argparse fills optional positionals greedily where the first of them appears (CPython issue 14191),
    so MESSAGE after an option would be "unrecognized"; intermixed parsing is its own remedy, but the
    top-level parser cannot use it (it has subcommands): this subcommand's parser does.
    """

    _nested = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._nested:  # parse_known_intermixed_args calls back in here
            return super().parse_known_args(args, namespace)
        self._nested = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._nested = False


def _local_model_syntax() -> str:
    """The local model's markers (provider = "local"), as `chat --help` shows them."""
    from flightdeck.domain.scripted_model import SYNTAX

    width = max(len(marker) for marker, _ in SYNTAX)
    lines = [f"  {marker:<{width}}  {meaning}" for marker, meaning in SYNTAX]
    return 'the local model (provider = "local") reads these markers in a message:\n' + "\n".join(lines)


def add_chat_command(commands: Any) -> None:
    sub = commands.add_parser(
        "chat",
        help="talk to an agent: one of ours (URL), or any A2A agent, v1.0 or v0.3 (--a2a CARD_URL)",
        description="Send MESSAGE and print the answer; without MESSAGE, a conversation (REPL): each line is a\n"
        "message in the same session, /card prints the agent card, Ctrl-D exits. Piped in (not a terminal),\n"
        "stdin is one message.\n\n"
        "To one of our agents (its base URL, as `flightdeck local up` prints it): POST /api/chat, then the\n"
        "delegation timeline as it happens from the session's event stream, GET /api/sessions/{id}/events\n"
        "(on a terminal the answer is printed as it is written), or by polling GET /api/sessions/{id} where\n"
        "the agent does not stream. Ctrl-C stops following; the session keeps working.\n"
        "To any A2A agent (--a2a CARD_URL): its card (v1.0 when it lists JSONRPC 1.0, else v0.3), then\n"
        "message/stream when the card says it streams (resumed with Last-Event-ID if it breaks), else\n"
        "message/send and tasks/get; follow-ups continue the contextId. Ctrl-C cancels the task\n"
        "(tasks/cancel). --task ID alone reattaches to a task: its history, then its events.\n\n"
        "Answers go to stdout; the timeline and notes to stderr.",
        epilog="examples:\n"
        '  flightdeck chat http://127.0.0.1:8080 "@worker count these words"\n'
        "  FLIGHTDECK_TOKEN=fdp_user_... flightdeck chat https://abc.execute-api.eu-west-1.amazonaws.com/prod\n"
        '  flightdeck chat --a2a https://agent.example.com/.well-known/agent-card.json "hello"\n\n'
        + _local_model_syntax(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.__class__ = _IntermixedParser  # add_parser offers no parser class of one's own
    sub.add_argument("url", nargs="?", metavar="URL", help="the agent's base URL (not with --a2a)")
    sub.add_argument(
        "message", nargs="?", metavar="MESSAGE", help="send this, print the answer and exit (without it: a REPL)"
    )
    sub.add_argument(
        "--a2a",
        metavar="CARD_URL",
        help="talk A2A to the agent of this card (a base URL gets /.well-known/agent-card.json appended)",
    )
    sub.add_argument(
        "--token",
        metavar="T",
        help=f"bearer token (default: ${TOKEN_ENV}); for our agents a peer token fdp_<peer>_<secret>",
    )
    sub.add_argument("--session", metavar="ID", help="continue this session of one of our agents")
    sub.add_argument("--context", metavar="ID", help="A2A: continue this contextId")
    sub.add_argument(
        "--task",
        metavar="ID",
        help="A2A: this task; without a MESSAGE, reattach to it (its history, then its events to its end); "
        "with one, continue it (a task waiting for input)",
    )
    sub.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_S,
        metavar="S",
        help=f"wait at most S seconds for one answer (default {DEFAULT_WAIT_S:.0f})",
    )
    sub.set_defaults(run=run)
