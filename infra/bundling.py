"""The one Lambda code asset: the `flightdeck` package plus its run-time dependencies.

Bundled on this machine at synth time, without Docker: `LocalBundler` runs
`pip install --platform manylinux2014_aarch64 --only-binary=:all: ...` into a cache
directory keyed by everything that determines its content (requirements, platform,
Python version), then copies the cached dependencies and the package into the
asset directory. A second synthesis with the same requirements reinstalls nothing.

Only what Lambda runs goes in: the package without its tools (TOOLS: the local
runtime, the bench, the CLI, the peers admin and the ops commands), which no production module
imports (tests/infra/test_infra_asset.py checks both).

The asset hash covers the package files that go in, the bundle settings and the
distributions pip actually resolved (name, version and wheel tags of each, read
from the installed .dist-info): two machines that resolve different wheels for the
same requirement strings produce different hashes, so neither overwrites the
other's asset in the bootstrap bucket.

The requirements are the `[project].dependencies` of pyproject.toml (the single
list of run-time dependencies) minus the AWS SDK, which the Lambda Python runtime
provides. Pip may still pull the SDK in transitively (aws-xray-sdk depends on
botocore): it is removed again, so the asset never shadows the runtime's SDK.

Switches (CDK context wins over the environment):

| context          | environment                | default                | effect |
|------------------|----------------------------|------------------------|--------|
| `bundleDeps`     | `FLIGHTDECK_BUNDLE_DEPS`   | true                   | false: copy only the package (fast, offline; NOT deployable) |
| `bundlePlatform` | `FLIGHTDECK_BUNDLE_PLATFORM` | `lambda`             | `host`: wheels for this machine and interpreter (tests import the asset; NOT deployable) |
| -                | `FLIGHTDECK_BUNDLE_CACHE`  | ~/.cache/flightdeck/lambda-deps | where installed dependencies are cached |
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_
from constructs import Node

REPO_ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS_DIR = REPO_ROOT / "functions"
PACKAGE_NAME = "flightdeck"
PACKAGE_DIR = FUNCTIONS_DIR / PACKAGE_NAME
PYPROJECT = REPO_ROOT / "pyproject.toml"

# The Lambda runtime the asset is built for. Runtime, architecture, pip platform
# and pip Python version are derived from these two lines, so they cannot drift.
LAMBDA_PYTHON_VERSION = "3.13"
RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
LAMBDA_PIP_PLATFORM = "manylinux2014_aarch64"

# Provided by the Lambda Python runtime; never bundled (a bundled copy would shadow
# the runtime's and could mismatch its boto3).
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")

# Bump when the layout of the cached install changes.
_CACHE_SCHEME = 1
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")
# Parts of the package that Lambda never runs: kept out of the asset (paths relative to the package).
TOOLS = (
    "local",
    "bench",
    "cli.py",
    "peers_admin.py",
    "peer_discovery.py",
    "peers_sync.py",
    "config_reference.py",
    "chat_client",
    "ops",
)


def is_tool(rel: Path) -> bool:
    """True for a path (relative to the package directory) inside one of the TOOLS."""
    return bool(rel.parts) and rel.parts[0] in TOOLS


class BundlingError(RuntimeError):
    """The asset could not be built (pip failed, package missing, ...)."""


def truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a boolean, got {value!r}")


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise BundlingError(f"cannot read a package name from requirement {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def runtime_requirements(pyproject: Path = PYPROJECT) -> tuple[str, ...]:
    """pyproject's run-time dependencies, without what the Lambda runtime provides."""
    data = tomllib.loads(pyproject.read_text())
    deps = data.get("project", {}).get("dependencies", [])
    provided = {_requirement_name(p) for p in RUNTIME_PROVIDED}
    return tuple(d for d in deps if _requirement_name(d) not in provided)


@dataclass(frozen=True)
class BundleSettings:
    """How the asset is built for this synthesis."""

    deps: bool = True
    # "lambda": wheels for the Lambda runtime (deployable); "host": for this machine.
    platform: str = "lambda"
    cache_dir: Path = Path.home() / ".cache" / "flightdeck" / "lambda-deps"

    @classmethod
    def from_context(cls, node: Node, environ: Mapping[str, str] | None = None) -> BundleSettings:
        env = os.environ if environ is None else environ

        def pick(context_key: str, env_key: str) -> Any:
            value = node.try_get_context(context_key)
            return env.get(env_key) if value is None else value

        deps = pick("bundleDeps", "FLIGHTDECK_BUNDLE_DEPS")
        plat = pick("bundlePlatform", "FLIGHTDECK_BUNDLE_PLATFORM") or "lambda"
        if plat not in ("lambda", "host"):
            raise ValueError(f"bundlePlatform must be 'lambda' or 'host', got {plat!r}")
        cache = env.get("FLIGHTDECK_BUNDLE_CACHE")
        if not cache and env.get("XDG_CACHE_HOME"):
            cache = str(Path(env["XDG_CACHE_HOME"]) / "flightdeck" / "lambda-deps")
        return cls(
            deps=True if deps is None else truthy(deps),
            platform=str(plat),
            cache_dir=Path(cache) if cache else cls.cache_dir,
        )

    @property
    def deployable(self) -> bool:
        return self.deps and self.platform == "lambda"

    def pip_target_args(self) -> list[str]:
        if self.platform == "host":
            return []  # the running interpreter's own platform and version
        return [
            "--platform",
            LAMBDA_PIP_PLATFORM,
            "--only-binary=:all:",
            "--python-version",
            LAMBDA_PYTHON_VERSION,
            "--implementation",
            "cp",
        ]

    def describe(self) -> dict[str, Any]:
        """Everything that determines the installed dependencies."""
        target = (
            {"platform": LAMBDA_PIP_PLATFORM, "python": LAMBDA_PYTHON_VERSION}
            if self.platform == "lambda"
            else {"platform": f"host-{sys.platform}-{platform.machine()}", "python": "%d.%d" % sys.version_info[:2]}
        )
        return {
            "scheme": _CACHE_SCHEME,
            "deps": self.deps,
            "requirements": list(runtime_requirements()) if self.deps else [],
            "pruned": list(RUNTIME_PROVIDED),
            **target,
        }


def _sha256(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def package_fingerprint(package_dir: Path = PACKAGE_DIR) -> str:
    """Hash of every file of the package that goes into the asset."""
    if not (package_dir / "__init__.py").is_file():
        raise BundlingError(f"{package_dir} is not a Python package")
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*")):
        rel = path.relative_to(package_dir)
        if not path.is_file() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo") or is_tool(rel):
            continue
        digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def installed_dependencies(settings: BundleSettings) -> Path:
    """The cached pip install for these settings, installing it on first use."""
    key = _sha256(settings.describe())[:20]
    final = settings.cache_dir / key
    if (final / ".complete").is_file():
        return final
    settings.cache_dir.mkdir(parents=True, exist_ok=True)
    staging = settings.cache_dir / f"{key}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        "--no-compile",
        "--target",
        str(staging),
        *settings.pip_target_args(),
        *runtime_requirements(),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BundlingError(
            "pip could not install the Lambda dependencies "
            f"(set FLIGHTDECK_BUNDLE_DEPS=0 or -c bundleDeps=false to skip them):\n"
            f"$ {' '.join(command)}\n{result.stderr[-4000:]}"
        )
    _prune(staging)
    (staging / ".complete").write_text(json.dumps(settings.describe(), indent=2) + "\n")
    try:
        os.rename(staging, final)
    except OSError:  # another synthesis won the race: its install is equivalent
        shutil.rmtree(staging, ignore_errors=True)
        if not (final / ".complete").is_file():
            raise
    return final


def resolved_distributions(target: Path) -> list[str]:
    """`name==version [wheel tags]` of every distribution installed in target, sorted."""
    found = []
    for info in sorted(target.glob("*.dist-info")):
        fields: dict[str, list[str]] = {}
        for name in ("METADATA", "WHEEL"):
            path = info / name
            if path.is_file():
                for line in path.read_text(errors="replace").splitlines():
                    key, sep, value = line.partition(": ")
                    if not sep:
                        if name == "METADATA" and not line.strip():
                            break  # the headers end at the first blank line
                        continue
                    fields.setdefault(key, []).append(value.strip())
        dist = _requirement_name(fields.get("Name", [info.name])[0])
        version = fields.get("Version", ["?"])[0]
        tags = ",".join(sorted(fields.get("Tag", [])))
        found.append(f"{dist}=={version} [{tags}]")
    return found


def _prune(target: Path) -> None:
    """Drop what the Lambda runtime provides, and console scripts."""
    shutil.rmtree(target / "bin", ignore_errors=True)
    provided = {_requirement_name(p) for p in RUNTIME_PROVIDED}
    for entry in list(target.iterdir()):
        name = entry.name
        if name.endswith(".dist-info"):
            dist = _requirement_name(name[: -len(".dist-info")].rsplit("-", 1)[0])
            if dist in provided:
                shutil.rmtree(entry)
        elif name in RUNTIME_PROVIDED:
            shutil.rmtree(entry)


@jsii.implements(cdk.ILocalBundling)
class LocalBundler:
    """CDK local bundling: builds the asset with pip on this machine, never Docker."""

    def __init__(self, settings: BundleSettings) -> None:
        self.settings = settings

    def try_bundle(self, output_dir: str, options: Any = None) -> bool:  # noqa: ARG002 - jsii signature
        out = Path(output_dir)
        if self.settings.deps:
            shutil.copytree(installed_dependencies(self.settings), out, dirs_exist_ok=True, ignore=_IGNORED)
            (out / ".complete").unlink(missing_ok=True)
        shutil.copytree(PACKAGE_DIR, out / PACKAGE_NAME, dirs_exist_ok=True, ignore=_ignore_tools)
        return True


def _ignore_tools(directory: str, names: list[str]) -> set[str]:
    ignored = set(_IGNORED(directory, names))
    rel = Path(directory).resolve().relative_to(PACKAGE_DIR.resolve())
    return ignored | {n for n in names if is_tool(rel / n)}


def asset_hash(settings: BundleSettings) -> str:
    """Package content + settings + the resolved dependencies (installing them on first use)."""
    resolved = resolved_distributions(installed_dependencies(settings)) if settings.deps else []
    return _sha256({"package": package_fingerprint(), "bundle": settings.describe(), "resolved": resolved})


def lambda_code(settings: BundleSettings) -> lambda_.Code:
    """A fresh Code object (one per stack: CDK binds an asset to one stack)."""
    requirements = " ".join(f"'{r}'" for r in runtime_requirements())
    # Only used if local bundling declined, which LocalBundler never does.
    docker_command = (
        f"pip install --no-compile -t /asset-output {requirements} && "
        f"rm -rf /asset-output/boto3* /asset-output/botocore* /asset-output/s3transfer* && "
        f"cp -r /asset-input/{PACKAGE_NAME} /asset-output/ && "
        f"rm -rf {' '.join(f'/asset-output/{PACKAGE_NAME}/{t}' for t in TOOLS)}"
    )
    return lambda_.Code.from_asset(
        str(FUNCTIONS_DIR),
        asset_hash=asset_hash(settings),
        asset_hash_type=cdk.AssetHashType.CUSTOM,
        bundling=cdk.BundlingOptions(
            image=RUNTIME.bundling_image,
            command=["bash", "-c", docker_command],
            local=LocalBundler(settings),
        ),
    )
