"""JSON Schemas as contracts: checked before use, instances checked against them, and the shorthand
callers send ("number", "string[]", nested objects) turned into JSON Schema.

The validator is jsonschema-rs (a compiled validator: ~50 ms to import against ~170 ms for the
pure-Python `jsonschema`; docs/SKILLS.md has the figures). It is imported on first use, so an agent
whose skills declare no schema pays nothing for it at cold start, and each schema's validator is
built once per process.

Every schema is checked before it is compiled: bounded in size and depth, and its `$ref`s local
(`#...`) only, so a hostile schema is refused with a message and never fetches anything.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

# Limits on a schema given in a request (responseSchema) or a deployment file.
MAX_SCHEMA_BYTES = 16_384
MAX_SCHEMA_DEPTH = 12
# Errors listed in a refusal or a mismatch: enough to fix it, not a flood.
MAX_ERRORS = 10
# A version travels with every contract, so old and new requests can be told apart.
SCHEMA_VERSION = "1"

_SHORTHAND_TYPES = {"string", "number", "integer", "boolean", "object", "null", "any"}


class SchemaError(ValueError):
    """A schema that cannot be used as a contract; the message says why."""


def _depth(value: Any, limit: int, level: int = 0) -> int:
    if level > limit:
        return level
    if isinstance(value, dict):
        return max((_depth(v, limit, level + 1) for v in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(v, limit, level + 1) for v in value), default=level)
    return level


def _refs(value: Any) -> list[str]:
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if ref is not None:
                found.append(ref if isinstance(ref, str) else repr(ref))
            for key in ("$dynamicRef", "$recursiveRef"):
                if key in item:
                    found.append(f"{key} {item[key]!r}")
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def check_schema(schema: Any) -> None:
    """Raise SchemaError unless `schema` is a usable contract: a JSON Schema object (or boolean) within
    the limits, with local references only, valid against its draft's metaschema."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(f"a schema is a JSON object, not {type(schema).__name__}")
    size = len(json.dumps(schema, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > MAX_SCHEMA_BYTES:
        raise SchemaError(f"the schema is {size} bytes; at most {MAX_SCHEMA_BYTES}")
    if _depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise SchemaError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    for ref in _refs(schema):
        if not ref.startswith("#"):
            raise SchemaError(f"$ref {ref[:200]!r} is not local: only references inside the schema (#...) are allowed")
    dialect = schema.get("$schema")
    if dialect is not None and not isinstance(dialect, str):
        raise SchemaError("$schema must be a string")
    import jsonschema_rs

    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        raise SchemaError(f"not a valid JSON Schema: {_message(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - an unknown $schema dialect, an unresolvable reference
        raise SchemaError(f"not a usable JSON Schema: {str(exc).splitlines()[0][:300]}") from None
    _validator(json.dumps(schema, sort_keys=True))  # it compiles (a reference that resolves nowhere fails here)


def _message(exc: Any) -> str:
    path = "/".join(str(p) for p in getattr(exc, "instance_path", []) or [])
    text = str(getattr(exc, "message", exc)).splitlines()[0][:300]
    return f"at /{path}: {text}" if path else text


def _refuse_remote(uri: str) -> Any:
    raise SchemaError(f"$ref {uri[:200]!r} is not fetched: only local references are allowed")


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    import jsonschema_rs

    try:
        return jsonschema_rs.validator_for(json.loads(schema_json), retriever=_refuse_remote)
    except SchemaError:
        raise
    except Exception as exc:  # noqa: BLE001 - the library's own error for a schema it cannot build
        raise SchemaError(f"not a usable JSON Schema: {str(exc).splitlines()[0][:300]}") from None


def errors(schema: Any, instance: Any) -> list[str]:
    """What is wrong with `instance` against `schema` (checked with check_schema before), at most
    MAX_ERRORS lines, each naming where: [] when it matches."""
    if schema is True:
        return []
    if schema is False:
        return ["nothing matches this schema (false)"]
    validator = _validator(json.dumps(schema, sort_keys=True))
    found = []
    for exc in validator.iter_errors(instance):
        found.append(_message(exc))
        if len(found) >= MAX_ERRORS:
            break
    return found


def from_shorthand(spec: Any, level: int = 0) -> dict[str, Any]:
    """The JSON Schema of a shorthand: "number", "string[]", "string?" (may be null), {"a": "number",
    "b": {"c": "string[]"}} (every field required), ["number"] (a list of those). Raises SchemaError."""
    if level > MAX_SCHEMA_DEPTH:
        raise SchemaError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    if isinstance(spec, str):
        name = spec.strip()
        if name.endswith("[]"):
            return {"type": "array", "items": from_shorthand(name[:-2], level + 1)}
        if name.endswith("?"):
            inner = from_shorthand(name[:-1], level + 1)
            return {"anyOf": [inner, {"type": "null"}]}
        if name not in _SHORTHAND_TYPES:
            allowed = ", ".join(sorted(_SHORTHAND_TYPES))
            raise SchemaError(f"unknown type {name[:50]!r} in the shorthand: one of {allowed}, with [] or ?")
        return {} if name == "any" else {"type": name}
    if isinstance(spec, list):
        if len(spec) != 1:
            raise SchemaError('a list in the shorthand holds exactly one item type, e.g. ["number"]')
        return {"type": "array", "items": from_shorthand(spec[0], level + 1)}
    if isinstance(spec, dict):
        properties = {str(k): from_shorthand(v, level + 1) for k, v in spec.items()}
        return {"type": "object", "properties": properties, "required": list(properties)}
    raise SchemaError(f"a shorthand is a type name, a list or an object, not {type(spec).__name__}")


def is_json_schema(value: Any) -> bool:
    """A JSON Schema rather than a shorthand: it says so ($schema), or its keys are JSON Schema's."""
    if not isinstance(value, dict):
        return False
    if any(str(k).startswith("$") for k in value):
        return True  # $schema, $ref, $defs...: no shorthand field starts with $
    keywords = {"type", "properties", "items", "anyOf", "oneOf", "allOf", "enum", "const", "$ref", "required"}
    return (
        "type" in value
        and isinstance(value["type"], (str, list))
        and set(value)
        <= keywords
        | {
            "description",
            "title",
            "additionalProperties",
            "minimum",
            "maximum",
            "minItems",
            "maxItems",
            "minLength",
            "maxLength",
            "pattern",
            "format",
            "default",
            "examples",
            "$defs",
            "definitions",
            "$id",
            "not",
            "if",
            "then",
            "else",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
            "uniqueItems",
            "prefixItems",
            "propertyNames",
            "patternProperties",
            "minProperties",
            "maxProperties",
            "contains",
            "nullable",
        }
    )


def response_schema(value: Any) -> dict[str, Any]:
    """A caller's responseSchema, as JSON Schema: given as JSON Schema or as the shorthand. Raises
    SchemaError (too big, too deep, not local, not valid)."""
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > MAX_SCHEMA_BYTES:
        raise SchemaError(f"the schema is {size} bytes; at most {MAX_SCHEMA_BYTES}")
    schema = value if is_json_schema(value) else from_shorthand(value)
    check_schema(schema)
    return schema
