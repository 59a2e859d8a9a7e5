"""The first hour's mistakes (issue 15): each is refused at start by the one check of the whole file,
with one message that names the file, the TOML key and the fix.

Each case edits examples/three-agents.toml the way a new user would get it wrong and runs
`flightdeck local up` on it: nothing starts, the exit code is 2, and stderr says it once.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from flightdeck import cli, config_check, config_file

REPO = Path(__file__).resolve().parents[2]
THREE = REPO / "examples" / "three-agents.toml"
BASE = THREE.read_text()
CRITIC_ALLOW = """description = "Reviews drafts and points out weak spots."
system_prompt = "You review critically and briefly."
allow = ["orchestrator"]"""
CRITIC_PEER = 'orchestrator = "fdp_orchestrator_LOCAL-ONLY-orchestrator-calls-critic-0123"'


def variant(tmp_path: Path, old: str, new: str) -> Path:
    assert old in BASE, old
    path = tmp_path / "agents.toml"
    path.write_text(BASE.replace(old, new, 1))
    return path


def refused(path: Path, capsys, *extra: str) -> str:
    """Run `flightdeck local up` on the file: it must refuse at once (exit 2); its stderr."""
    assert cli.main(["local", "up", "--config", str(path), *extra]) == cli.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""  # no READY: nothing started
    err = captured.err
    assert err.startswith("flightdeck: invalid deployment file:")
    assert "Traceback" not in err and "pydantic" not in err and "errors.pydantic.dev" not in err
    return err


def problem_lines(err: str) -> list[str]:
    return [line.strip() for line in err.splitlines()[1:] if line.strip()]


def test_the_examples_pass_the_check_locally_and_for_aws():
    for example in (config_file.DEFAULT_CONFIG, THREE):
        deployment = config_file.load(example)
        assert config_check.check(deployment, example, "local") == deployment
        assert config_check.check(deployment, example, "aws") == deployment


def test_a_delegate_naming_no_agent_suggests_the_nearest_name(tmp_path, capsys):
    path = variant(tmp_path, 'agent = "critic"', 'agent = "critc"')
    [line] = problem_lines(refused(path, capsys))
    assert line == (
        f'{path}: [[agents.orchestrator.delegates]] #2 agent: no agent "critc" in this file. '
        'Fix: did you mean "critic"?'
    )
    assert "ALLOWED_HOST_MAPPING" not in line


def test_the_delegators_allow_lacking_the_delegate(tmp_path, capsys):
    path = variant(tmp_path, 'allow = ["researcher", "critic"]', 'allow = ["researcher"]')
    [line] = problem_lines(refused(path, capsys))
    assert line.startswith(
        f'{path}: [agents.orchestrator].allow: lacks "critic", which [[agents.orchestrator.delegates]] #2 delegates to'
    )
    assert line.endswith('Fix: allow = ["researcher", "critic"].')


def test_the_delegates_allow_lacking_the_caller_names_the_section_for_the_way_back(tmp_path, capsys):
    path = variant(tmp_path, CRITIC_ALLOW, CRITIC_ALLOW.replace('allow = ["orchestrator"]', "allow = []"))
    [line] = problem_lines(refused(path, capsys))
    assert line.startswith(
        f'{path}: [agents.critic].allow: lacks "orchestrator": critic could not send its answers back to orchestrator'
    )
    assert line.endswith('Fix: allow = ["orchestrator"].')


def test_no_peer_token_for_the_caller_points_at_peers(tmp_path, capsys):
    path = variant(tmp_path, CRITIC_PEER, "")
    [line] = problem_lines(refused(path, capsys))
    assert line.startswith(
        f'{path}: [agents.critic.peers]: has no token for "orchestrator", which delegates to '
        "critic ([[agents.orchestrator.delegates]] #2): its tasks would be refused with 401"
    )
    assert 'Fix: add orchestrator = "fdp_orchestrator_' in line and "under [agents.critic.peers]" in line
    token = line.split('add orchestrator = "', 1)[1].split('"', 1)[0]
    # The suggested token works: with it the file passes.
    path.write_text(
        path.read_text().replace("[agents.critic.peers]\n", f'[agents.critic.peers]\norchestrator = "{token}"\n')
    )
    config_check.load_checked(path, "local")


def test_a_token_the_callee_does_not_list_is_refused_too(tmp_path, capsys):
    stranger = "fdp_orchestrator_not-the-one-critic-lists-0123456789abcdef"
    path = variant(
        tmp_path,
        'callback_secret = "local-only-orchestrator-secret-0123456789abcdef"',
        f'callback_secret = "local-only-orchestrator-secret-0123456789abcdef"\n'
        f'peer_tokens = {{ critic = "{stranger}" }}',
    )
    [line] = problem_lines(refused(path, capsys))
    assert line.startswith(
        f"{path}: [agents.orchestrator.peer_tokens].critic: is not a token [agents.critic.peers] "
        "lists: critic would refuse orchestrator's tasks with 403"
    )


def test_an_unknown_setting_suggests_the_real_one(tmp_path, capsys):
    path = variant(tmp_path, "[defaults]\n", "[defaults]\nASYNC_TOOL_TIMEOUT = 5000\n")
    [line] = problem_lines(refused(path, capsys))
    assert line == f"{path}: [defaults].ASYNC_TOOL_TIMEOUT: is not a setting. Fix: rename it to ASYNC_TOOL_TIMEOUT_MS."


def test_an_unknown_setting_in_an_agents_env(tmp_path, capsys):
    path = variant(
        tmp_path, "[agents.critic.peers]", "[agents.critic.env]\nTOTALLY_MADE_UP = 1\n\n[agents.critic.peers]"
    )
    [line] = problem_lines(refused(path, capsys))
    assert line.startswith(f"{path}: [agents.critic.env].TOTALLY_MADE_UP: is not a setting. Fix: remove it")


def test_a_misspelled_key_suggests_the_right_one_without_pydantic_text(tmp_path, capsys):
    path = variant(tmp_path, "skills = [", "skils = [")
    [line] = problem_lines(refused(path, capsys))
    assert line == f'{path}: [agents.orchestrator].skils: unknown key "skils". Fix: rename it to "skills".'


def test_a_misspelled_section(tmp_path, capsys):
    path = variant(tmp_path, "[agents.critic.model]", "[agents.critic.modle]")
    [line] = problem_lines(refused(path, capsys))
    assert line == f"{path}: [agents.critic.modle]: unknown section. Fix: rename it to [agents.critic.model]."


def test_a_wrongly_typed_default_is_named_once_with_its_section(tmp_path, capsys):
    path = variant(tmp_path, "ASYNC_TOOL_TIMEOUT_MS = 30000", 'ASYNC_TOOL_TIMEOUT_MS = "soon"')
    err = refused(path, capsys)
    [line] = problem_lines(err)  # once, not once per agent (the file has three)
    assert line == (
        f'{path}: [defaults].ASYNC_TOOL_TIMEOUT_MS: must be a valid integer (it is "soon"). '
        "Fix: write a whole number, without quotes, e.g. ASYNC_TOOL_TIMEOUT_MS = 300000."
    )
    assert err.count("ASYNC_TOOL_TIMEOUT_MS") == 2  # the key and the example in the fix


def test_wrong_types_and_values_in_sections(tmp_path, capsys):
    path = variant(tmp_path, "think_delay_ms = 300", 'think_delay_ms = "slow"\nmax_tokens = 0')
    lines = problem_lines(refused(path, capsys))
    assert (
        sorted(lines)
        == [
            f'{path}: [agents.critic.model].think_delay_ms: must be a valid integer (it is "slow"). '
            "Fix: write a whole number, without quotes.",
            f"{path}: [agents.critic.model].max_tokens: must be greater than 0 (it is 0). Fix: use a number above 0.",
        ][::-1]
    )


def test_a_bad_literal_is_written_with_toml_quotes(tmp_path, capsys):
    path = variant(tmp_path, '[agents.critic.model]\nprovider = "local"', '[agents.critic.model]\nprovider = "bedrok"')
    [line] = problem_lines(refused(path, capsys))
    assert line == (
        f'{path}: [agents.critic.model].provider: must be "local" or "bedrock" (it is "bedrok"). '
        'Fix: write "local" or "bedrock".'
    )


def test_every_problem_of_a_file_at_once(tmp_path, capsys):
    path = variant(tmp_path, 'agent = "critic"', 'agent = "critc"')
    path.write_text(
        path.read_text()
        .replace("skills = [", "skils = [")
        .replace("[defaults]\n", "[defaults]\nASYNC_TOOL_TIMEOUT = 5000\n")
    )
    lines = problem_lines(refused(path, capsys))
    # Structure first (the file cannot be read as a deployment until it is right)...
    assert [line.split(": ")[1] for line in lines] == ["[defaults].ASYNC_TOOL_TIMEOUT", "[agents.orchestrator].skils"]
    path.write_text(path.read_text().replace("skils = [", "skills = [").replace("ASYNC_TOOL_TIMEOUT = 5000\n", ""))
    # ...then what the agents need of each other.
    [line] = problem_lines(refused(path, capsys))
    assert "[[agents.orchestrator.delegates]] #2 agent" in line


def _without_aws_credentials(monkeypatch, tmp_path):
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


BEDROCK = (
    '[agents.researcher.model]\nprovider = "local"',
    '[agents.researcher.model]\nprovider = "bedrock"\nmodel_id = "us.anthropic.claude-3-5-haiku-20241022-v1:0"',
)


def test_bedrock_under_local_up_without_credentials_is_refused_with_the_fix(tmp_path, capsys, monkeypatch):
    _without_aws_credentials(monkeypatch, tmp_path)
    path = variant(tmp_path, *BEDROCK)
    [line] = problem_lines(refused(path, capsys))
    assert line.startswith(
        f'{path}: [agents.researcher.model].provider: "bedrock" cannot run here: '
        "`flightdeck local` has no AWS credentials"
    )
    assert 'Fix: set provider = "local"' in line and "--local-model" in line and "AWS credentials" in line


def test_bedrock_falls_back_to_the_local_model_only_when_asked(tmp_path, monkeypatch):
    _without_aws_credentials(monkeypatch, tmp_path)
    path = variant(tmp_path, *BEDROCK)
    deployment = config_file.load(path)
    with pytest.raises(config_file.ConfigFileError):
        config_check.check(deployment, path, "local")
    ran = config_check.check(deployment, path, "local", local_model=True)
    assert ran.agents["researcher"].model.provider == "local"
    assert deployment.agents["researcher"].model.provider == "bedrock"  # the file's deployment is untouched
    assert config_check.check(deployment, path, "aws") == deployment  # on AWS Bedrock is where it runs


def test_bedrock_with_credentials_reaches_bedrock_and_only_bedrock(tmp_path, monkeypatch):
    from flightdeck.local.stack import bedrock_access

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    path = variant(tmp_path, *BEDROCK)
    config_check.check(config_file.load(path), path, "local", aws_credentials=True)
    access = bedrock_access()
    assert access["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"] == "https://bedrock-runtime.us-east-1.amazonaws.com"
    assert access["AWS_ACCESS_KEY_ID"] == "AKIAEXAMPLEEXAMPLE" and "AWS_ENDPOINT_URL" not in access


def test_bedrock_needs_a_model_id_everywhere(tmp_path):
    path = variant(
        tmp_path, '[agents.researcher.model]\nprovider = "local"', '[agents.researcher.model]\nprovider = "bedrock"'
    )
    for runtime in ("local", "aws"):
        with pytest.raises(config_file.ConfigFileError, match=r"\[agents.researcher.model\].model_id: is required"):
            config_check.check(config_file.load(path), path, runtime, aws_credentials=True)


def _taken_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_port_clash_on_the_moto_port_names_moto_port(capsys):
    with _taken_port() as sock:
        port = sock.getsockname()[1]
        assert cli.main(["local", "up", "--moto-port", str(port)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is already in use (wanted by the moto server)" in err
    assert "choose another with --moto-port N" in err and "--port N" not in err.replace("--moto-port N", "")


def test_a_port_clash_on_an_agent_port_names_port(capsys):
    with _taken_port() as sock:
        port = sock.getsockname()[1]
        assert cli.main(["local", "up", "--port", str(port)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "wanted by agent 'orchestrator'" in err and "choose another with --port N" in err


def test_demo_and_bench_refuse_the_same_mistakes(tmp_path, capsys):
    path = variant(tmp_path, 'agent = "critic"', 'agent = "critc"')
    for command in (["local", "demo"], ["bench", "--quick"]):
        assert cli.main([*command, "--config", str(path)]) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert '[[agents.orchestrator.delegates]] #2 agent: no agent "critc"' in err, command


def test_for_aws_an_allowed_peer_may_live_elsewhere_but_a_delegate_must_resolve(tmp_path):
    path = variant(tmp_path, 'allow = ["researcher", "critic"]', 'allow = ["researcher", "critic", "partner"]')
    deployment = config_file.load(path)
    config_check.check(deployment, path, "aws")  # its URL comes from deploy.peer_urls, or a warning says so
    with pytest.raises(config_file.ConfigFileError, match=r'\[agents.orchestrator\].allow: names "partner"'):
        config_check.check(deployment, path, "local")


@pytest.mark.parametrize(
    "loc, key",
    [
        (("agents", "critic", "allow"), "[agents.critic].allow"),
        (("agents", "critic", "model", "provider"), "[agents.critic.model].provider"),
        (("agents", "a", "delegates", 0, "agent"), "[[agents.a.delegates]] #1 agent"),
        (("agents", "w", "gateway", "peer_limits", "x", "rate_limit"), "[agents.w.gateway.peer_limits.x].rate_limit"),
        (("agents", "w", "env", "ASYNC_TOOL_TIMEOUT_MS"), "[agents.w.env].ASYNC_TOOL_TIMEOUT_MS"),
        (("agents", "two words"), '[agents."two words"]'),
        (("defaults",), "[defaults]"),
        (("agents", "critic", "allow", 0), "[agents.critic].allow[0]"),
    ],
)
def test_toml_keys_are_spelled_as_in_the_file(loc, key):
    assert config_file.toml_key(loc) == key


def test_a_delegating_tool_named_like_the_built_in_ask_user_is_refused_unless_asking_is_off(tmp_path, capsys):
    path = variant(tmp_path, 'agent = "critic"', 'agent = "critic"\ntool_name = "ask_user"')
    [line] = problem_lines(refused(path, capsys))
    assert line == (
        f"{path}: [[agents.orchestrator.delegates]] #2 tool_name: delegate 'critic': its tool name ask_user is "
        'the built-in ask_user tool\'s. Fix: give it another tool_name (e.g. "ask_critic_agent"), or set '
        "ask_user = false."
    )
    off = variant(tmp_path, 'agent = "critic"', 'agent = "critic"\ntool_name = "ask_user"').read_text()
    path.write_text(off.replace("[agents.orchestrator]\n", "[agents.orchestrator]\nask_user = false\n", 1))
    assert config_file.load(path).agents["orchestrator"].ask_user is False


def test_a_delegates_own_timeout_is_checked_and_named_by_its_key(tmp_path, capsys):
    path = variant(tmp_path, "timeout_ms = 20000", 'timeout_ms = "soon"')
    [line] = problem_lines(refused(path, capsys))
    assert line == (
        f'{path}: [[agents.orchestrator.delegates]] #2 timeout_ms: must be a valid integer (it is "soon"). '
        "Fix: write a whole number, without quotes."
    )
    path = variant(tmp_path, "timeout_ms = 20000", "timeout_ms = 0")
    [line] = problem_lines(refused(path, capsys))
    assert line == (
        f"{path}: [[agents.orchestrator.delegates]] #2 timeout_ms: must be greater than 0 (it is 0). "
        "Fix: use a number above 0."
    )
    # It travels in AGENT_CONFIG: the agent's settings read it, unset meaning ASYNC_TOOL_TIMEOUT_MS.
    spec = config_file.load(THREE).agents["orchestrator"]
    delegates = json.loads(spec.agent_config_json())["delegates"]
    assert [(d["agent"], d["timeout_ms"]) for d in delegates] == [("researcher", None), ("critic", 20000)]
    assert [d.timeout_or(30000) for d in spec.delegates] == [30000, 20000]


def test_built_in_tools_are_read_under_their_name_and_under_the_older_local_tools(tmp_path):
    for key in ("builtin_tools", "local_tools"):
        path = variant(tmp_path, CRITIC_ALLOW, CRITIC_ALLOW + f'\n{key} = ["word_count"]')
        deployment = config_check.load_checked(path, "local")
        definition = json.loads(deployment.agents["critic"].agent_config_json())
        assert definition["builtin_tools"] == ["word_count"] and "local_tools" not in definition


TWO = config_file.DEFAULT_CONFIG.read_text()


def test_inbound_auth_off_is_refused_for_aws_naming_the_key_unless_a_test_rig_is_meant(tmp_path):
    path = tmp_path / "open.toml"
    path.write_text(TWO + '\n[agents.worker.env]\nINBOUND_AUTH = "off"\n')
    deployment = config_file.load(path)
    with pytest.raises(config_file.ConfigFileError) as refused_for_aws:
        config_check.check(deployment, path, "aws")
    [line] = str(refused_for_aws.value).splitlines()
    assert line.startswith(f'{path}: [agents.worker.env].INBOUND_AUTH: is "off" for worker: deployed to AWS')
    assert "Fix: remove it" in line and "-c allow_open_agents=true" in line
    assert config_check.check(deployment, path, "aws", allow_open_agents=True) == deployment
    assert config_check.check(deployment, path, "local") == deployment  # locally it stays a test rig's choice
    # Set for every agent in [defaults]: one problem, naming them all.
    path.write_text(TWO.replace('INBOUND_AUTH = "required"', 'INBOUND_AUTH = "off"', 1))
    with pytest.raises(
        config_file.ConfigFileError, match=r'\[defaults\].INBOUND_AUTH: is "off" for orchestrator, worker'
    ):
        config_check.check(config_file.load(path), path, "aws")


# --- skills with contracts (issue 25): schemas are checked when the file is read ---------------------


@pytest.mark.parametrize(
    "skill, message",
    [
        (
            'id = "q"\ninput_schema = { type = "object", properties = { a = { type = "nope" } } }',
            "[[agents.critic.skills]] #1 input_schema: not a valid JSON Schema: at /properties/a/type",
        ),
        (
            'id = "q"\ninput_schema = { type = "object", required = ["x"] }\nexamples = [{ y = 1 }]',
            '[[agents.critic.skills]] #1 examples[0]: does not match input_schema: "x" is a required property',
        ),
        (
            'id = "q"\noutput_schema = { "$ref" = "https://attacker.example/s.json" }',
            "[[agents.critic.skills]] #1 output_schema: $ref 'https://attacker.example/s.json' is not local",
        ),
        (
            'id = "q"\nhandler = "magic"',
            "[[agents.critic.skills]] #1 handler: 'magic' is not a handler. Fix: use one of: calculator, word_count",
        ),
        ('id = "Not An Id"', "[[agents.critic.skills]] #1 id: must match pattern"),
        ('id = "q"\nexpose = ["smoke-signals"]', "[[agents.critic.skills]] #1 expose"),
    ],
)
def test_a_skill_s_schemas_are_checked_when_the_file_is_read_naming_the_toml_key(tmp_path, capsys, skill, message):
    path = tmp_path / "agents.toml"
    path.write_text(BASE + "\n[[agents.critic.skills]]\n" + skill + "\n")
    err = refused(path, capsys)
    assert message in err, err


@pytest.mark.parametrize("example", ["two-agents", "three-agents", "bedrock", "mcp-tools"])
def test_every_example_passes_flightdeck_check_where_it_runs(example, capsys):
    """Each bundled file passes `flightdeck check --local`, and every one but mcp-tools (its credential is an env:
    reference, for a local run) `flightdeck check` as for AWS; that one's refusal points at --local."""
    path = str(REPO / "examples" / f"{example}.toml")
    assert cli.main(["check", "--config", path, "--local"]) == cli.EXIT_OK
    capsys.readouterr()
    if example != "mcp-tools":
        assert cli.main(["check", "--config", path]) == cli.EXIT_OK
        return
    assert cli.main(["check", "--config", path]) == cli.EXIT_USAGE
    _, err = capsys.readouterr()
    assert f"for a local run: flightdeck check --local --config {path}" in err
