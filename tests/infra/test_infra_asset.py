"""The Lambda code asset: every handler string in the template imports from the asset alone.

Two checks, because the deployed asset holds aarch64/cp313 wheels (pydantic-core
is compiled) that this machine may not be able to load:

1. The deployable asset (from `synth`, found in cdk.out): every handler module
   file is there, the compiled wheels are for the Lambda platform, the AWS SDK is
   not bundled, and every module-level import reachable from a handler resolves
   inside the asset, the standard library, or the SDK the Lambda runtime provides
   (static: importlib's PathFinder over the asset directory only).
2. The same asset built for this machine (`host_synth`, context bundlePlatform=host):
   each handler is really imported in an isolated interpreter (`python -I -S`: no
   site-packages, no PYTHONPATH, not the repository) whose path is the asset plus
   a directory holding only boto3/botocore/s3transfer (what Lambda provides),
   with the function's environment from the template.

Handler modules are written alongside this issue: a missing one fails here, by design.

The asset holds the Lambda code only: the tools (infra.bundling.TOOLS: the local runtime,
the bench, the CLI, the peers admin, the chat client) are left out, and no module that is in
imports one, not even lazily inside a function.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from template_queries import STREAMING_HANDLER, function_ids, resources

from flightdeck import topology
from infra.bundling import RUNTIME_PROVIDED, TOOLS

pytestmark = pytest.mark.slow

STACK = "Flightdeck-orchestrator"


def _need_deps(synth) -> None:
    if not synth.deps_bundled:
        pytest.skip("dependencies not bundled (FLIGHTDECK_BUNDLE_DEPS=0): the asset cannot be checked")


@pytest.fixture(scope="module")
def asset(synth) -> Path:
    return synth.asset_dir(STACK)


def test_every_function_uses_the_one_asset(synth, asset: Path) -> None:
    template = synth.templates[STACK]
    keys = {f["Properties"]["Code"]["S3Key"] for f in resources(template, "AWS::Lambda::Function").values()}
    assert keys == {asset.name.removeprefix("asset.") + ".zip"}


def _entry_points(template, handler: str) -> list[str]:
    """What a function runs: its handler string; for a streaming function (its handler the web adapter's
    start script, flightdeck/handlers/web.sh) the web server's app and the handler module it calls."""
    handler_string = template["Resources"][function_ids(template)[handler]]["Properties"]["Handler"]
    if handler_string == STREAMING_HANDLER:
        return [f"flightdeck.handlers.{handler}.handler", "flightdeck.handlers.web.app"]
    return [handler_string]


def test_the_streaming_functions_start_script_is_in_the_asset_and_executable(synth, asset: Path) -> None:
    script = asset / STREAMING_HANDLER
    assert script.is_file() and script.stat().st_mode & 0o111 == 0o111, oct(script.stat().st_mode)
    text = script.read_text()
    assert text.startswith("#!/bin/sh\n") and "\r" not in text  # /bin/sh runs it as is (LF line ends)
    assert "exec python3 -m flightdeck.handlers.web" in text


@pytest.mark.parametrize("handler", topology.HANDLERS)
def test_handler_module_is_in_the_asset(synth, asset: Path, handler: str) -> None:
    for entry in _entry_points(synth.templates[STACK], handler):
        _entry_point_in_asset(asset, entry)


def _entry_point_in_asset(asset: Path, handler_string: str) -> None:
    module, attr = handler_string.rsplit(".", 1)
    assert attr in ("handler", "app")
    spec = importlib.machinery.PathFinder.find_spec("flightdeck", [str(asset)])
    assert spec is not None and spec.origin == str(asset / "flightdeck" / "__init__.py")
    path = asset / Path(*module.split(".")).with_suffix(".py")
    assert path.is_file(), f"{handler_string}: {path.relative_to(asset)} is not in the asset"
    tree = ast.parse(path.read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    imported = {(a.asname or a.name) for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert attr in defined | assigned | imported, f"{module} defines no {attr!r}"


def test_dependencies_are_for_the_lambda_platform(synth, asset: Path) -> None:
    _need_deps(synth)
    for package in ("aws_lambda_powertools", "pydantic", "pydantic_core", "requests"):
        assert (asset / package).is_dir(), f"{package} is not bundled"
    compiled = list((asset / "pydantic_core").glob("*.so"))
    assert compiled and all("cpython-313-aarch64-linux-gnu" in p.name for p in compiled), compiled
    for provided in RUNTIME_PROVIDED:
        assert not (asset / provided).exists(), f"{provided} is provided by the Lambda runtime and must not be bundled"
    assert not list(asset.rglob("__pycache__"))


def test_the_tools_are_not_in_the_asset(asset: Path) -> None:
    for tool in TOOLS:
        assert not (asset / "flightdeck" / tool).exists(), f"flightdeck/{tool} is a tool: it must not be in the asset"
    assert (asset / "flightdeck" / "handlers").is_dir()


def _every_import(path: Path, package: str) -> set[str]:
    """Every absolute module name a file may import, at module level or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def test_no_module_in_the_asset_imports_a_tool(asset: Path) -> None:
    tools = {f"flightdeck.{t.removesuffix('.py')}" for t in TOOLS}
    problems = []
    for path in sorted((asset / "flightdeck").rglob("*.py")):
        rel = path.relative_to(asset).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for name in _every_import(path, package):
            if any(name == t or name.startswith(t + ".") for t in tools):
                problems.append(f"{module} imports {name}")
    assert problems == [], "production code must not import the tools:\n" + "\n".join(problems)


def _module_level_imports(path: Path, package: str) -> set[str]:
    """Absolute names imported when the module runs (not inside functions, TYPE_CHECKING or try/ImportError)."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                names.add(base)
                names.update(f"{base}.{a.name}?" for a in node.names)  # maybe a submodule
            elif isinstance(node, ast.If):
                test = ast.unparse(node.test)
                if "TYPE_CHECKING" not in test:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                catches_import_error = any(
                    h.type is not None and any(n in ast.unparse(h.type) for n in ("ImportError", "ModuleNotFoundError"))
                    for h in node.handlers
                )
                if not catches_import_error:
                    visit(node.body)
                visit(node.finalbody)
            elif isinstance(node, (ast.With,)):
                visit(node.body)

    visit(ast.parse(path.read_text()).body)
    return names


def _module_file(asset: Path, name: str) -> Path | None:
    base = asset / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_imports_reachable_from_handlers_resolve_in_the_asset(synth, asset: Path) -> None:
    _need_deps(synth)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    todo = [f"flightdeck.handlers.{h}" for h in topology.HANDLERS] + ["flightdeck.handlers.web"]
    seen: set[str] = set()
    problems: list[str] = []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        path = _module_file(asset, name)
        if path is None:
            problems.append(f"{name}: not in the asset")
            continue
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for imported in _module_level_imports(path, package):
            optional = imported.endswith("?")
            imported = imported.rstrip("?")
            top = imported.split(".")[0]
            if top == "flightdeck":
                if _module_file(asset, imported) is not None:
                    todo.append(imported)
                elif not optional:
                    problems.append(f"{name} imports {imported}: not in the asset")
            elif optional or top in stdlib or top in RUNTIME_PROVIDED:
                continue
            elif importlib.machinery.PathFinder.find_spec(top, [str(asset)]) is None:
                problems.append(f"{name} imports {top}: neither bundled, nor stdlib, nor provided by Lambda")
    assert problems == [], "\n".join(sorted(set(problems)))


# --- really importing, from an asset built for this machine -----------------------------

_IMPORT_SCRIPT = """
import importlib, json, sys
asset, runtime = sys.argv[1:3]
sys.path[:0] = [asset, runtime]
result = {"ok": False}
try:
    ok, files = True, []
    for handler_string in sys.argv[3:]:
        module_name, attr = handler_string.rsplit(".", 1)
        module = importlib.import_module(module_name)
        fn = getattr(module, attr)
        ok = ok and callable(fn) and module.__file__.startswith(asset)
        files.append(module.__file__)
    result = {
        "ok": ok,
        "file": files,
        "pydantic": importlib.import_module("pydantic").__file__,
    }
except BaseException as exc:
    import traceback
    result = {"ok": False, "error": "".join(traceback.format_exception(exc))[-3000:]}
print(json.dumps(result))
"""


def _placeholder(name: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if name == "STATE_TABLE":
        return "flightdeck-test-state"
    if name.endswith("_URL"):
        return f"https://sqs.us-east-1.amazonaws.com/123456789012/{name.lower()}"
    if name.endswith("_ARN"):
        return "arn:aws:secretsmanager:us-east-1:123456789012:secret:callback-AbCdEf"
    raise AssertionError(f"unexpected unresolved variable {name}: {value}")


@pytest.fixture(scope="module")
def runtime_sdk_dir(tmp_path_factory) -> Path:
    """A directory with only what the Lambda runtime adds: the AWS SDK."""
    target = tmp_path_factory.mktemp("lambda-runtime")
    for name in RUNTIME_PROVIDED:
        spec = importlib.util.find_spec(name)
        assert spec and spec.submodule_search_locations, f"{name} is needed to emulate the Lambda runtime"
        (target / name).symlink_to(Path(next(iter(spec.submodule_search_locations))))
    return target


@pytest.fixture(scope="module")
def import_results(host_synth, runtime_sdk_dir: Path) -> dict[str, dict]:
    if not host_synth.deps_bundled:
        pytest.skip("dependencies not bundled (FLIGHTDECK_BUNDLE_DEPS=0): nothing to import them from")
    (stack,) = host_synth.stacks
    template = host_synth.templates[stack]
    asset = host_synth.asset_dir(stack)
    processes = {}
    for handler, lid in function_ids(template).items():
        props = template["Resources"][lid]["Properties"]
        env = {k: _placeholder(k, v) for k, v in props["Environment"]["Variables"].items()}
        env.update(
            PATH=os.environ.get("PATH", "/usr/bin:/bin"),
            AWS_REGION="us-east-1",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            LANG="C.UTF-8",
        )
        processes[handler] = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                "-c",
                _IMPORT_SCRIPT,
                str(asset),
                str(runtime_sdk_dir),
                *_entry_points(template, handler),
            ],
            env=env,
            cwd=str(runtime_sdk_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    results = {}
    for handler, proc in processes.items():
        out, err = proc.communicate(timeout=120)
        try:
            results[handler] = json.loads(out.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            results[handler] = {"ok": False, "error": f"exit {proc.returncode}: {err[-3000:]}"}
        results[handler]["asset"] = str(asset)
    return results


@pytest.mark.parametrize("handler", topology.HANDLERS)
def test_handler_imports_from_the_asset_alone(import_results: dict[str, dict], handler: str) -> None:
    result = import_results[handler]
    assert result["ok"], result.get("error") or result
    assert result["pydantic"].startswith(result["asset"]), "pydantic came from outside the asset"
