"""A valid instance of a JSON Schema, built from a task's text: what the local scripted model answers
when it is held to a schema (flightdeck.domain.scripted_model), so runs without a real model still
exercise structured answers. Deterministic; covers the keywords contracts use (types, properties,
items, enum, const, anyOf/oneOf/allOf, local $ref, length and number bounds)."""

from __future__ import annotations

from typing import Any

_MAX_DEPTH = 8
_OPTIONAL_DEPTH = 3


def _resolve(root: dict[str, Any], ref: str) -> Any:
    node: Any = root
    for part in ref.lstrip("#").split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        node = node.get(part) if isinstance(node, dict) else None
    return node if node is not None else {}


def instance_of(schema: Any, text: str, root: Any = None, depth: int = 0) -> Any:
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return None if schema is False else text
    if "$ref" in schema and isinstance(schema["$ref"], str):
        return instance_of(_resolve(root, schema["$ref"]), text, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            if key == "allOf":
                merged: dict[str, Any] = {}
                for part in schema[key]:
                    merged.update(part if isinstance(part, dict) else {})
                return instance_of({**{k: v for k, v in schema.items() if k != key}, **merged}, text, root, depth + 1)
            return instance_of(schema[key][0], text, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    words = text.split()
    if kind == "object":
        given = schema.get("properties")
        properties: dict[str, Any] = given if isinstance(given, dict) else {}
        required = [r for r in schema.get("required", []) if isinstance(r, str)]
        # Optional fields only near the top: a recursive schema (a list, a tree) ends.
        names = [n for n in properties if n in required or depth < _OPTIONAL_DEPTH]
        names += [r for r in required if r not in properties]
        return {name: instance_of(properties.get(name, {}), text, root, depth + 1) for name in names}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1) or 1))
        return [instance_of(schema.get("items", {}), text, root, depth + 1) for _ in range(min(count, 5))]
    if kind in ("number", "integer"):
        number = len(words)
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        high = schema.get("maximum", schema.get("exclusiveMaximum"))
        if isinstance(low, (int, float)) and number < low:
            number = int(low) + (1 if "exclusiveMinimum" in schema else 0)
        if isinstance(high, (int, float)) and number > high:
            number = int(high) - (1 if "exclusiveMaximum" in schema else 0)
        return number
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    value = " ".join(words) or "-"
    limit = schema.get("maxLength")
    if isinstance(limit, int) and limit >= 0:
        value = value[:limit]
    least = schema.get("minLength")
    if isinstance(least, int) and len(value) < least:
        value = value + "-" * (least - len(value))
    return value
