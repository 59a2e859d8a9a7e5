"""No import circles in the package: every import, at module level or inside a function, and
under TYPE_CHECKING too, draws an edge; a strongly connected set of modules is a circle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "flightdeck"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_finder_sees_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_package_has_no_import_circle():
    graph = import_graph()
    assert len(graph) > 50 and graph["flightdeck.wiring"]  # the graph was read
    assert circles(graph) == []


# --- layers: which package may import which ------------------------------------------------------

TOOLS = ("flightdeck.local", "flightdeck.bench", "flightdeck.cli", "flightdeck.peers_admin", "flightdeck.chat_client")


def _under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _external_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def wrong_way(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Edges that cross a layer the wrong way: the domain knows no adapter, API, handler, wiring or tool;
    the core domain knows no protocol add-on (flightdeck.domain.a2a plugs in through Deps, in wiring);
    adapters know no API or handler; the API no handler; production code no tool."""
    rules = [
        (
            ("flightdeck.domain",),
            ("flightdeck.adapters", "flightdeck.api", "flightdeck.handlers", "flightdeck.wiring", *TOOLS),
        ),
        (("flightdeck.adapters",), ("flightdeck.api", "flightdeck.handlers", "flightdeck.wiring", *TOOLS)),
        (("flightdeck.api",), ("flightdeck.handlers", *TOOLS)),
        (("flightdeck.handlers", "flightdeck.wiring", "flightdeck.observability", "flightdeck.settings"), TOOLS),
    ]
    bad = []
    for source, targets in sorted(graph.items()):
        for low, forbidden in rules:
            if _under(source, *low):
                bad += [(source, t) for t in sorted(targets) if _under(t, *forbidden)]
        core = _under(source, "flightdeck.domain") and not _under(source, "flightdeck.domain.a2a")
        if core:
            # Deps names the type of the add-on's own ports (Deps.a2a, under TYPE_CHECKING): the one exception.
            allowed = {"flightdeck.domain.a2a.ports"} if source == "flightdeck.domain.ports" else set()
            bad += [(source, t) for t in sorted(targets) if _under(t, "flightdeck.domain.a2a") and t not in allowed]
    return bad


def test_the_layering_finder_sees_a_wrong_way_edge():
    graph = {
        "flightdeck.domain.turn_loop": {"flightdeck.domain.a2a.tasks", "flightdeck.domain.records"},
        "flightdeck.adapters.x": {"flightdeck.handlers.y"},
        "flightdeck.domain.a2a.tasks": {"flightdeck.domain.records"},
    }
    assert wrong_way(graph) == [
        ("flightdeck.adapters.x", "flightdeck.handlers.y"),
        ("flightdeck.domain.turn_loop", "flightdeck.domain.a2a.tasks"),
    ]


def test_no_module_imports_across_the_layers_the_wrong_way():
    assert wrong_way(import_graph()) == []


def test_the_domain_imports_no_aws_sdk_and_no_http_client():
    for name, path in _modules().items():
        if _under(name, "flightdeck.domain"):
            assert not _external_imports(path) & {"boto3", "botocore", "requests", "urllib3"}, name


# The MCP channel (flightdeck.api.mcp) and the A2A channel (flightdeck.domain.a2a, flightdeck.api.a2a_*)
# both import the engine, never each other; the engine imports neither.
_A2A = (
    "flightdeck.domain.a2a",
    "flightdeck.api.a2a_routes",
    "flightdeck.api.a2a_stream_routes",
    "flightdeck.api.a2a_push_routes",
    "flightdeck.api.a2a_v1",
)
_MCP = ("flightdeck.api.mcp", "flightdeck.api.mcp_routes")


def channel_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    def under(name: str, roots: tuple[str, ...]) -> bool:
        return any(name == r or name.startswith(r + ".") for r in roots)

    bad = []
    for source, targets in graph.items():
        for target in sorted(targets):
            if (under(source, _MCP) and under(target, _A2A)) or (under(source, _A2A) and under(target, _MCP)):
                bad.append((source, target))
            if under(source, ("flightdeck.domain",)) and under(target, _MCP):
                bad.append((source, target))
    return bad


def test_the_mcp_and_a2a_channels_do_not_import_each_other():
    assert channel_violations(import_graph()) == []
    assert channel_violations({"flightdeck.api.mcp.tools": {"flightdeck.domain.a2a.tasks"}}) == [
        ("flightdeck.api.mcp.tools", "flightdeck.domain.a2a.tasks")
    ]


# A2A v0.3 and v1.0 on one endpoint (issue 27): flightdeck.api.a2a_routes holds the JSON-RPC envelope and
# v0.3's method table and routes to v1.0's (flightdeck.api.a2a_v1), never the other way; v1.0's wire objects
# and converters (flightdeck.domain.a2a.wire_v1) import no other module of the package: the core never
# depends on a version's shapes but through them.
def a2a_version_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    bad = [(s, t) for s, ts in graph.items() if s == "flightdeck.api.a2a_v1" for t in sorted(ts) if t in _A2A[1:]]
    bad += [
        (s, t)
        for s, ts in graph.items()
        if s == "flightdeck.domain.a2a.wire_v1"
        for t in sorted(ts)
        if t.startswith("flightdeck.")
    ]
    return bad


def test_the_a2a_version_tables_import_each_other_one_way_only():
    assert a2a_version_violations(import_graph()) == []
    assert a2a_version_violations({"flightdeck.api.a2a_v1": {"flightdeck.api.a2a_routes"}}) == [
        ("flightdeck.api.a2a_v1", "flightdeck.api.a2a_routes")
    ]
    assert "flightdeck.api.a2a_v1" in import_graph()["flightdeck.api.a2a_routes"]


# The core in v1.0's shape (issue 39): the A2A core (every module of flightdeck.domain.a2a but the edges below)
# takes version-neutral requests (flightdeck.domain.a2a.core_models) and imports no version's wire models or
# converters; each version converts at its edge. No v1.0 module imports v0.3's params, models or converters.
_A2A_DOMAIN = "flightdeck.domain.a2a"
_V03 = {f"{_A2A_DOMAIN}.wire", f"{_A2A_DOMAIN}.from_v03"}
_V10 = {f"{_A2A_DOMAIN}.wire_v1", f"{_A2A_DOMAIN}.from_v1", "flightdeck.api.a2a_v1"}
# Not the core: the versions' wire models and converters, the delivery of a push in its config's version, and the
# client side (our delegations to peers of either version).
_A2A_EDGES = _V03 | _V10 | {f"{_A2A_DOMAIN}.push_delivery", f"{_A2A_DOMAIN}.client"}


def a2a_core_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    bad = []
    for source, targets in sorted(graph.items()):
        core = source.startswith(_A2A_DOMAIN + ".") and source not in _A2A_EDGES
        for target in sorted(targets):
            if (core and target in _V03 | _V10) or (source in _V10 and target in _V03):
                bad.append((source, target))
    return bad


def test_the_a2a_core_imports_no_version_and_v1_imports_nothing_of_v03():
    graph = import_graph()
    assert {"flightdeck.domain.a2a.tasks", "flightdeck.domain.a2a.core_models"} <= set(graph)
    assert a2a_core_violations(graph) == []
    assert a2a_core_violations(
        {
            "flightdeck.domain.a2a.tasks": {"flightdeck.domain.a2a.wire", "flightdeck.domain.a2a.core_models"},
            "flightdeck.domain.a2a.stream": {"flightdeck.domain.a2a.wire_v1"},
            "flightdeck.api.a2a_v1": {"flightdeck.domain.a2a.wire", "flightdeck.domain.a2a.from_v1"},
            "flightdeck.domain.a2a.from_v1": {"flightdeck.domain.a2a.from_v03"},
            "flightdeck.domain.a2a.from_v03": {"flightdeck.domain.a2a.wire"},
        }
    ) == [
        ("flightdeck.api.a2a_v1", "flightdeck.domain.a2a.wire"),
        ("flightdeck.domain.a2a.from_v1", "flightdeck.domain.a2a.from_v03"),
        ("flightdeck.domain.a2a.stream", "flightdeck.domain.a2a.wire_v1"),
        ("flightdeck.domain.a2a.tasks", "flightdeck.domain.a2a.wire"),
    ]


# The DynamoDB state (flightdeck.adapters.dynamo): a store per port over shared layers. Each module may
# import only the layers below its own (keys, conflicts < codec < table < ops < the stores < store); a store imports
# no other store (the sessions store its intake alone), so what stores share lives in ops, by name.
# Outside the package only the shared layers and the composed StateStore are imported.
_DYNAMO = "flightdeck.adapters.dynamo"
_DYNAMO_LAYERS = {
    "keys": set(),
    "conflicts": set(),
    "codec": {"keys"},
    "table": {"keys", "codec", "conflicts"},
    "ops": {"keys", "codec", "table"},
    **{s: {"keys", "codec", "table", "ops"} for s in ("intake", "iterations", "turns", "liveness", "dispatch")},
    "sessions": {"keys", "codec", "table", "ops", "intake"},
    "store": {"sessions", "iterations", "turns", "liveness", "dispatch"},
}
_DYNAMO_PUBLIC = {"keys", "codec", "table", "store"}


def dynamo_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    bad = []
    for source, targets in sorted(graph.items()):
        inside = source.startswith(_DYNAMO + ".")
        for target in sorted(targets):
            if not target.startswith(_DYNAMO + "."):
                continue
            name = target[len(_DYNAMO) + 1 :]
            allowed = _DYNAMO_LAYERS.get(source[len(_DYNAMO) + 1 :], set()) if inside else _DYNAMO_PUBLIC
            if name not in allowed:
                bad.append((source, target))
    return bad


def test_the_dynamo_stores_import_only_the_layers_below_them():
    graph = import_graph()
    assert set(_DYNAMO_LAYERS) == {m[len(_DYNAMO) + 1 :] for m in graph if m.startswith(_DYNAMO + ".")}
    assert dynamo_violations(graph) == []
    assert dynamo_violations(
        {
            f"{_DYNAMO}.turns": {f"{_DYNAMO}.sessions", f"{_DYNAMO}.ops"},
            f"{_DYNAMO}.keys": {f"{_DYNAMO}.codec"},
            "flightdeck.adapters.a2a_state": {f"{_DYNAMO}.ops", f"{_DYNAMO}.table"},
        }
    ) == [
        ("flightdeck.adapters.a2a_state", f"{_DYNAMO}.ops"),
        (f"{_DYNAMO}.keys", f"{_DYNAMO}.codec"),
        (f"{_DYNAMO}.turns", f"{_DYNAMO}.sessions"),
    ]
