"""The built-in MCP tools' schemas in the portable subset the MCP Inspector's --strict check asks for (issue 41:
it warned 4 times): no `type` arrays (a one-type dialect such as Gemini's OpenAPI subset rejects them) and no
schema without a validation keyword (it constrains nothing)."""

from __future__ import annotations

from typing import Any

from flightdeck.api.mcp.tools import _builtin_tools

_VALIDATION = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "$ref"}


def _problems(schema: Any, path: str) -> list[str]:
    if not isinstance(schema, dict):
        return []
    found = []
    if isinstance(schema.get("type"), list):
        found.append(f"{path}: type is an array")
    if not _VALIDATION & set(schema):
        found.append(f"{path}: no validation keyword")
    for name, sub in (schema.get("properties") or {}).items():
        found += _problems(sub, f"{path}.properties.{name}")
    for keyword in ("anyOf", "oneOf", "allOf"):
        for index, sub in enumerate(schema.get(keyword) or []):
            found += _problems(sub, f"{path}.{keyword}[{index}]")
    if isinstance(schema.get("items"), dict):
        found += _problems(schema["items"], f"{path}.items")
    return found


def test_the_builtin_tools_schemas_are_portable():
    problems = []
    for tool in _builtin_tools():
        for key in ("inputSchema", "outputSchema"):
            problems += _problems(tool[key], f"{tool['name']}.{key}")
    assert problems == []
