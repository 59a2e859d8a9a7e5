"""Pure pieces of infra/: no synthesis needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from flightdeck import config_file, config_models, topology
from infra import bundling
from infra.access import ACCESS, bedrock_resources
from infra.api import AUTHENTICATION
from infra.environment import MANAGED_VARIABLES, agent_environment, host_mapping
from infra.schedule import sweep_rate_minutes

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"
PREFIX = "/flightdeck/two-agents"
RESOURCES = {
    "STATE_TABLE": "flightdeck-worker-state",
    "TURN_WORKER_FUNCTION": "flightdeck-worker-turn-worker",
    "TURNS_QUEUE_URL": "u1",
    "THINKS_QUEUE_URL": "u6",
    "DISPATCH_QUEUE_URL": "u2",
    "DELIVERY_QUEUE_URL": "u3",
    "DELIVERY_DLQ_URL": "u4",
    "TIMERS_QUEUE_URL": "u5",
    "TOOL_CALLBACK_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:1:secret:x",
    "PEER_TOKENS_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:1:secret:peers",
}


@pytest.mark.parametrize(
    ("interval_ms", "minutes"),
    [(1, 1), (1000, 1), (15_000, 1), (60_000, 1), (60_001, 2), (150_000, 3), (300_000, 5)],
)
def test_sweep_rate_rounds_up_to_whole_minutes(interval_ms: int, minutes: int) -> None:
    assert sweep_rate_minutes(interval_ms) == minutes


def test_every_handler_has_permissions_and_an_authentication_story() -> None:
    assert set(topology.HANDLERS) <= set(ACCESS)
    assert {r.handler for r in topology.ROUTES} <= set(AUTHENTICATION)


def test_host_mapping_discovers_the_file_s_agents_and_a_configured_url_wins() -> None:
    deployment = config_file.load(EXAMPLE)
    spec = deployment.agents["orchestrator"]
    mapping = host_mapping(spec, deployment.agents)
    assert (mapping.value, mapping.discovered, mapping.missing) == ("", ("worker",), ())
    spec.deploy.peer_urls["worker"] = "https://w.example.com/prod/"
    mapping = host_mapping(spec, deployment.agents)
    assert (mapping.value, mapping.discovered, mapping.missing) == ("worker:https://w.example.com/prod/", (), ())


def test_host_mapping_leaves_a_name_outside_the_file_without_url_out() -> None:
    deployment = config_file.load(EXAMPLE)
    spec = deployment.agents["orchestrator"]
    spec.allow.append("elsewhere")
    mapping = host_mapping(spec, deployment.agents)
    assert (mapping.value, mapping.discovered, mapping.missing) == ("", ("worker",), ("elsewhere",))
    spec.allowed_hosts["elsewhere"] = "https://else.example.com/base"
    mapping = host_mapping(spec, deployment.agents)
    assert (mapping.value, mapping.discovered, mapping.missing) == (
        "elsewhere:https://else.example.com/base",
        ("worker",),
        (),
    )


def test_malformed_peer_url_fails_synth() -> None:
    deployment = config_file.load(EXAMPLE)
    deployment.agents["orchestrator"].deploy.peer_urls["worker"] = "ftp://w.example.com"
    with pytest.raises(ValueError, match="worker"):
        host_mapping(deployment.agents["orchestrator"], deployment.agents)


def test_environment_is_validated_with_settings() -> None:
    deployment = config_file.load(EXAMPLE)
    env = agent_environment(deployment, "worker", RESOURCES, peer_url_prefix=PREFIX)
    assert env.settings.agent_name == "worker"
    assert env.settings.tool_agg_punctuate_interval_ms == 1000
    assert set(MANAGED_VARIABLES) <= set(env.variables)
    deployment.defaults["ASYNC_TOOL_TIMEOUT_MS"] = "soon"
    with pytest.raises(ValueError, match="ASYNC_TOOL_TIMEOUT_MS"):
        agent_environment(deployment, "worker", RESOURCES, peer_url_prefix=PREFIX)


def test_oversized_environment_is_refused() -> None:
    deployment = config_file.load(EXAMPLE)
    # Text that does not compress (the definition is packed when that makes it smaller): still too large.
    deployment.agents["worker"].system_prompt = __import__("base64").b64encode(__import__("os").urandom(4000)).decode()
    with pytest.raises(ValueError, match="4096"):
        agent_environment(deployment, "worker", RESOURCES, peer_url_prefix=PREFIX)


def test_bedrock_resources() -> None:
    plain = bedrock_resources("anthropic.claude-3-haiku-20240307-v1:0")
    assert len(plain) == 1 and plain[0].endswith("::foundation-model/anthropic.claude-3-haiku-20240307-v1:0")
    profile = bedrock_resources("eu.anthropic.claude-3-haiku-20240307-v1:0")
    assert profile[0].endswith(":inference-profile/eu.anthropic.claude-3-haiku-20240307-v1:0")
    assert profile[1].endswith(":bedrock:*::foundation-model/anthropic.claude-3-haiku-20240307-v1:0")
    arn = "arn:aws:bedrock:eu-west-1:123456789012:application-inference-profile/abc"
    assert bedrock_resources(arn) == [arn]
    with pytest.raises(ValueError, match="model_id"):
        bedrock_resources("")


def test_runtime_requirements_come_from_pyproject_without_the_sdk() -> None:
    reqs = bundling.runtime_requirements()
    names = {bundling._requirement_name(r) for r in reqs}
    assert {"aws-lambda-powertools", "pydantic", "requests"} <= names
    assert not names & {"boto3", "botocore", "s3transfer"}


def test_bundle_settings_from_context_and_environment() -> None:
    class Node:
        def __init__(self, ctx):
            self.ctx = ctx

        def try_get_context(self, key):
            return self.ctx.get(key)

    default = bundling.BundleSettings.from_context(Node({}), {})
    assert default.deps and default.platform == "lambda" and default.deployable
    off = bundling.BundleSettings.from_context(Node({}), {"FLIGHTDECK_BUNDLE_DEPS": "0"})
    assert not off.deps and not off.deployable
    # context wins over the environment
    on = bundling.BundleSettings.from_context(Node({"bundleDeps": "true"}), {"FLIGHTDECK_BUNDLE_DEPS": "0"})
    assert on.deps
    host = bundling.BundleSettings.from_context(Node({"bundlePlatform": "host"}), {"FLIGHTDECK_BUNDLE_CACHE": "/x"})
    assert not host.deployable and host.cache_dir == Path("/x") and host.pip_target_args() == []
    assert "--only-binary=:all:" in default.pip_target_args()
    assert default.describe() != host.describe()
    with pytest.raises(ValueError):
        bundling.BundleSettings.from_context(Node({"bundlePlatform": "windows"}), {})


def test_asset_hash_follows_package_content_and_settings(tmp_path: Path) -> None:
    on, off = bundling.BundleSettings(deps=True), bundling.BundleSettings(deps=False)
    assert bundling.asset_hash(on) != bundling.asset_hash(off)
    assert bundling.asset_hash(on) == bundling.asset_hash(on)
    pkg = tmp_path / "flightdeck"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    before = bundling.package_fingerprint(pkg)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert bundling.package_fingerprint(pkg) == before
    (pkg / "new.py").write_text("x = 1\n")
    assert bundling.package_fingerprint(pkg) != before
    after = bundling.package_fingerprint(pkg)
    (pkg / "local").mkdir()
    (pkg / "local" / "tool.py").write_text("y = 2\n")
    (pkg / "cli.py").write_text("z = 3\n")
    (pkg / "chat_client").mkdir()
    (pkg / "chat_client" / "command.py").write_text("w = 4\n")
    assert bundling.package_fingerprint(pkg) == after  # tools are not in the asset, nor in its hash


def _dist(target: Path, name: str, version: str, tag: str) -> None:
    info = target / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nName: not-a-header\n")
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tag}\n")


def test_resolved_distributions_name_versions_and_wheel_tags(tmp_path: Path) -> None:
    _dist(tmp_path, "pydantic-core", "2.27.2", "cp313-cp313-manylinux_2_17_aarch64")
    _dist(tmp_path, "requests", "2.32.3", "py3-none-any")
    assert bundling.resolved_distributions(tmp_path) == [
        "pydantic-core==2.27.2 [cp313-cp313-manylinux_2_17_aarch64]",
        "requests==2.32.3 [py3-none-any]",
    ]


def test_asset_hash_follows_the_resolved_versions(tmp_path: Path, monkeypatch) -> None:
    """Same requirement strings, different resolution (another machine, another day): another hash."""
    one, two = tmp_path / "one", tmp_path / "two"
    _dist(one, "requests", "2.32.3", "py3-none-any")
    _dist(two, "requests", "2.32.4", "py3-none-any")
    settings = bundling.BundleSettings(deps=True)
    monkeypatch.setattr(bundling, "installed_dependencies", lambda _settings: one)
    first = bundling.asset_hash(settings)
    monkeypatch.setattr(bundling, "installed_dependencies", lambda _settings: two)
    assert bundling.asset_hash(settings) != first


def test_local_bundler_copies_package_without_deps(tmp_path: Path) -> None:
    bundler = bundling.LocalBundler(bundling.BundleSettings(deps=False))
    assert bundler.try_bundle(str(tmp_path)) is True
    assert (tmp_path / "flightdeck" / "__init__.py").is_file()
    assert (tmp_path / "flightdeck" / "topology.py").is_file()
    assert not list(tmp_path.rglob("__pycache__"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flightdeck"]
    for tool in bundling.TOOLS:
        assert (bundling.PACKAGE_DIR / tool).exists(), f"{tool} moved: update bundling.TOOLS"
        assert not (tmp_path / "flightdeck" / tool).exists(), f"{tool} is a tool, not Lambda code"


def test_usage_plan_key_logical_ids_are_fixed_by_the_peer_alone() -> None:
    import re

    from infra.usage_plans import plan_key_logical_id

    ids = {peer: plan_key_logical_id(peer) for peer in ("user", "a-b", "ab", "_ab", "orchestrator", "x" * 63)}
    assert len(set(ids.values())) == len(ids)  # "a-b", "_ab" and "ab" stay apart
    assert all(re.fullmatch(r"[A-Za-z][A-Za-z0-9]{0,254}", lid) for lid in ids.values())
    assert plan_key_logical_id("user") == ids["user"] and ids["user"].startswith("PeerUsagePlanKeyUser")


def test_peer_authorizer_reads_the_peer_registry_and_nothing_else() -> None:
    access = ACCESS[topology.PEER_AUTHORIZER_HANDLER]
    assert access.read_peers
    assert not (
        access.table or access.send or access.send_to_dlq or access.secret or access.peer_tokens or access.model
    )


def test_alarm_emails_default_to_none() -> None:
    assert config_models.DeploySection().alarm_emails == []


def test_alarm_emails_accept_addresses() -> None:
    emails = ["ops@example.com", "on.call+flightdeck@mail.example.co.uk"]
    assert config_models.DeploySection(alarm_emails=emails).alarm_emails == emails


@pytest.mark.parametrize(
    "bad", ["ops", "ops@example", "ops@@example.com", "o ps@example.com", "ops@example.com ", "", "ops@example."]
)
def test_alarm_emails_refuse_what_is_not_an_address(bad: str) -> None:
    with pytest.raises(ValueError, match="alarm_emails"):
        config_models.DeploySection(alarm_emails=[bad])


def test_alarm_emails_refuse_duplicates() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        config_models.DeploySection(alarm_emails=["ops@example.com", "OPS@example.com"])


def test_skills_with_schemas_travel_packed_and_read_back_the_same() -> None:
    """AGENT_CONFIG is in the 4 KB environment: a definition above 1 KB goes zlib+base64 (schemas compress well),
    and the functions' settings read it back exactly."""
    from flightdeck.domain.skills.contract import Skill
    from flightdeck.settings import Settings

    deployment = config_file.load(EXAMPLE)
    worker = deployment.agents["worker"]
    schema = {
        "type": "object",
        "properties": {f"field_{i}": {"type": "string", "description": f"the {i}th field"} for i in range(25)},
        "required": ["field_0"],
    }
    worker.skills = [Skill(id=f"skill-{i}", input_schema=schema, output_schema=schema) for i in range(4)]
    plain = worker.agent_config_json()
    assert len(plain) > 4096  # would not fit the environment as it is
    env = agent_environment(deployment, "worker", RESOURCES, peer_url_prefix=PREFIX)
    packed = env.variables["AGENT_CONFIG"]
    assert packed.startswith("zlib+b64:") and len(packed) < len(plain) / 3
    assert env.settings.agent == Settings.from_env({**env.variables}).agent
    assert [s.input_schema for s in env.settings.agent.skills] == [schema] * 4
