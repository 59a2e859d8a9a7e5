"""docs/MISTAKES.md, row by row (issue 30): each mistake is made the way a new user would make it (in
examples/three-agents.toml, or by pointing `flightdeck chat` at moto), is refused before anything runs, and
the message names what the row says it names and gives the row's fix."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from flightdeck import cli, config_check, config_file, model_ids
from flightdeck.local.demo import check_demo as demo_check

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "docs" / "MISTAKES.md"
BASE = (REPO / "examples" / "three-agents.toml").read_text()
RESEARCHER_MODEL = '[agents.researcher.model]\nprovider = "local"'
A2A_PARTNER = """
[[agents.orchestrator.delegates]]
agent = "partner"
protocol = "a2a"
card_url = "https://partner.example/.well-known/agent-card.json"
"""

# Appended after the file's last line: an MCP server of the orchestrator, and two skills of the critic with one id.
LAST_LINE = "think_delay_ms = 300"
MCP_SERVER = """

[agents.orchestrator.allowed_hosts]
notes = "http://127.0.0.1:8931"

[[agents.orchestrator.mcp_servers]]
name = "notes"
url = "{url}"
credential = "{cred}"
"""
DUPLICATE_SKILLS = """

[[agents.critic.skills]]
id = "review"
[[agents.critic.skills]]
id = "review"
"""


def rows() -> list[tuple[int, str, str]]:
    """(number, what the message names, the fix) of each row of the table: the backticked text of its
    last two columns."""
    found = []
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].isdigit():
            names, fix = (re.fullmatch(r"`(.+)`", cell) for cell in cells[3:])
            assert names and fix, f"row {cells[0]}: its last two cells are one `code` span each"
            found.append((int(cells[0]), names.group(1), fix.group(1)))
    return found


def _file(tmp_path: Path, old: str, new: str) -> Path:
    assert old in BASE, old
    path = tmp_path / "agents.toml"
    path.write_text(BASE.replace(old, new, 1))
    return path


def _refused(capsys, *argv: str) -> str:
    """The command must refuse at once (exit 2, nothing on stdout); its stderr."""
    assert cli.main(list(argv)) == cli.EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and "pydantic" not in err
    return err


def _up(tmp_path: Path, capsys, old: str, new: str) -> str:
    err = _refused(capsys, "local", "up", "--config", str(_file(tmp_path, old, new)))
    assert err.startswith("flightdeck: invalid deployment file:")
    [line] = [x for x in err.splitlines()[1:] if x.strip()]  # one mistake, one line
    return line


def _without_aws_credentials(monkeypatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _chat_at_moto(capsys) -> str:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        err = _refused(capsys, "chat", f"http://{host}:{port}", "--token", "fdp_user_" + "x" * 32, "hi")
    finally:
        server.stop()
    assert "try again" not in err
    return err


def _model_not_enabled(tmp_path: Path, capsys, monkeypatch) -> str:
    """`flightdeck check --aws` on a model the account has not enabled. Bedrock's answers are stubbed (botocore's
    Stubber, with the shapes of Bedrock's API): moto does not serve Bedrock's control plane."""
    import boto3
    from botocore.stub import Stubber

    from flightdeck.ops import bedrock_access

    model = "amazon.nova-lite-v1:0"
    for name, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    bedrock = boto3.client("bedrock", region_name="us-east-1")
    monkeypatch.setattr(bedrock_access, "client", lambda aws, region: bedrock)
    path = _file(tmp_path, RESEARCHER_MODEL, RESEARCHER_MODEL.replace('"local"', f'"bedrock"\nmodel_id = "{model}"'))
    with Stubber(bedrock) as stub:
        stub.add_response(
            "get_foundation_model",
            {
                "modelDetails": {
                    "modelArn": "arn:aws:bedrock:us-east-1::foundation-model/" + model,
                    "modelId": model,
                    "modelLifecycle": {"status": "ACTIVE"},
                }
            },
        )
        stub.add_response(
            "get_foundation_model_availability",
            {
                "modelId": model,
                "agreementAvailability": {"status": "NOT_AVAILABLE"},
                "authorizationStatus": "NOT_AUTHORIZED",
                "entitlementAvailability": "AVAILABLE",
                "regionAvailability": "AVAILABLE",
            },
        )
        assert cli.main(["check", "--config", str(path), "--aws"]) == cli.EXIT_FAILURE
    _, err = capsys.readouterr()
    return err


MAKE: dict[int, Callable[[Path, pytest.CaptureFixture[str], pytest.MonkeyPatch], str]] = {
    1: lambda t, c, m: _up(t, c, "skills = [", "skils = ["),
    2: lambda t, c, m: _up(t, c, "[defaults]\n", "[defaults]\nASYNC_TOOL_TIMEOUT = 5000\n"),
    3: lambda t, c, m: _up(t, c, 'agent = "critic"', 'agent = "critc"'),
    4: lambda t, c, m: _up(t, c, 'allow = ["researcher", "critic"]', 'allow = ["researcher"]'),
    5: lambda t, c, m: _up(t, c, 'orchestrator = "fdp_orchestrator_LOCAL-ONLY-orchestrator-calls-critic-0123"', ""),
    6: lambda t, c, m: _up(t, c, "local-only-critic-secret-0123456789abcdef0123", "too-short"),
    7: lambda t, c, m: _up(t, c, "[defaults]\n", '[defaults]\nTOOL_CALLBACK_SECRET = "too-short"\n'),
    8: lambda t, c, m: _up(t, c, "[agents.researcher]\n", A2A_PARTNER + "\n[agents.researcher]\n"),
    9: lambda t, c, m: _refused(
        c,
        "local",
        "demo",
        "--config",
        str(_file(t, 'user = "fdp_user_LOCAL-ONLY-demo-user-token-0123456789abcdef"', "")),
    ),
    10: lambda t, c, m: _up(t, c, RESEARCHER_MODEL, '[agents.researcher.model]\nprovider = "bedrock"'),
    11: lambda t, c, m: _up(
        t, c, RESEARCHER_MODEL, '[agents.researcher.model]\nprovider = "bedrock"\nmodel_id = "claude-3-haiku"'
    ),
    12: lambda t, c, m: (
        _without_aws_credentials(m, t),
        _up(
            t, c, RESEARCHER_MODEL, RESEARCHER_MODEL.replace('"local"', '"bedrock"\nmodel_id = "amazon.nova-lite-v1:0"')
        ),
    )[1],
    13: lambda t, c, m: _chat_at_moto(c),
    14: _model_not_enabled,
    15: lambda t, c, m: _up(
        t,
        c,
        "[agents.critic]\n",
        '[agents.researcher.deploy]\nfront_door = "lean"\nconsole = true\n\n[agents.critic]\n',
    ),
    16: lambda t, c, m: _up(t, c, "think_delay_ms = 200", 'think_delay_ms = "200"'),
    17: lambda t, c, m: _up(t, c, LAST_LINE, LAST_LINE + MCP_SERVER.format(url="127.0.0.1:8931/mcp", cred="")),
    18: lambda t, c, m: _up(t, c, LAST_LINE, LAST_LINE + DUPLICATE_SKILLS),
    19: lambda t, c, m: _up(
        t,
        c,
        "fdp_orchestrator_LOCAL-ONLY-orchestrator-calls-critic-0123",
        "fdp_critic_LOCAL-ONLY-orchestrator-calls-0123",
    ),
    20: lambda t, c, m: _up(t, c, LAST_LINE, LAST_LINE + '\n[[agents.critic.skills]]\nid = "x"\nhandler = "nosuch"\n'),
    21: lambda t, c, m: _up(
        t, c, LAST_LINE, LAST_LINE + MCP_SERVER.format(url="http://127.0.0.1:8931/mcp", cred="fdp_x_" + "y" * 32)
    ),
    22: lambda t, c, m: _refused(
        c,
        "check",
        "--config",
        str(
            _file(t, LAST_LINE, LAST_LINE + MCP_SERVER.format(url="http://127.0.0.1:8931/mcp", cred="env:NOTES_TOKEN"))
        ),
    ),
}


def test_every_row_of_the_table_has_its_case():
    assert sorted(n for n, _, _ in rows()) == sorted(MAKE)


@pytest.mark.parametrize("number, names, fix", rows(), ids=lambda v: str(v) if isinstance(v, int) else None)
def test_each_mistake_is_refused_naming_the_key_and_the_fix(tmp_path, capsys, monkeypatch, number, names, fix):
    message = MAKE[number](tmp_path, capsys, monkeypatch)
    assert names in message, message
    assert fix in message, message
    if "Fix: " in message:  # the key before what is wrong, the fix after "Fix:"
        assert message.index(names) < message.index("Fix: ") < message.index(fix), message


@pytest.mark.parametrize(
    "model_id",
    [
        "anthropic.claude-3-5-haiku-20241022-v1:0",
        "us.anthropic.claude-3-5-haiku-20241022-v1:0",
        "eu.amazon.nova-pro-v1:0",
        "us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0",
        "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "meta.llama3-70b-instruct-v1:0",
        "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0",
        "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.anthropic.claude-3-haiku-20240307-v1:0",
        "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc123def456",
        "arn:aws-us-gov:bedrock:us-gov-west-1:123456789012:provisioned-model/xyz",
    ],
)
def test_bedrock_model_id_shapes_that_pass(model_id):
    assert model_ids.is_bedrock_model_id(model_id)


@pytest.mark.parametrize(
    "model_id",
    [
        "claude-3-haiku",
        "Claude 3.5 Haiku",
        "anthropic/claude-3-haiku",
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude",
        "arn:aws:s3:::bucket/key",
        " anthropic.claude-3-haiku-20240307-v1:0",
        "anthropic.",
    ],
)
def test_bedrock_model_id_shapes_that_are_refused(model_id):
    assert not model_ids.is_bedrock_model_id(model_id)


def test_an_a2a_card_url_under_allowed_hosts_passes_locally_and_on_aws_also_under_peer_urls(tmp_path):
    path = _file(
        tmp_path,
        "[agents.researcher]\n",
        A2A_PARTNER + "\n[agents.researcher]\n",
    )
    text = path.read_text()
    path.write_text(
        text.replace(
            'callback_secret = "local-only-orchestrator-secret-0123456789abcdef"',
            'callback_secret = "local-only-orchestrator-secret-0123456789abcdef"\n'
            'allowed_hosts = { partner = "https://partner.example" }',
        )
    )
    config_check.load_checked(path, "local")
    config_check.load_checked(path, "aws")
    # On AWS a deploy.peer_urls entry of an allowed name is in ALLOWED_HOST_MAPPING too.
    path.write_text(
        text.replace('allow = ["researcher", "critic"]', 'allow = ["researcher", "critic", "partner"]', 1)
        + '\n[agents.orchestrator.deploy]\npeer_urls = { partner = "https://partner.example" }\n'
    )
    config_check.load_checked(path, "aws")
    with pytest.raises(config_file.ConfigFileError, match=r"#3 card_url"):
        config_check.load_checked(path, "local")


def test_the_demo_check_passes_the_examples_and_an_open_delegator(tmp_path):
    for example in (config_file.DEFAULT_CONFIG, REPO / "examples" / "three-agents.toml"):
        demo_check(config_file.load(example), example)
    path = _file(
        tmp_path,
        'user = "fdp_user_LOCAL-ONLY-demo-user-token-0123456789abcdef"',
        "",
    )
    path.write_text(path.read_text().replace("[defaults]\n", '[defaults]\nINBOUND_AUTH = "off"\n'))
    demo_check(config_file.load(path), path)
