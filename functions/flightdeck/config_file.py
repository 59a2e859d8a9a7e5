"""A deployment of agents described in one TOML file (see examples/two-agents.toml).

The same file drives `flightdeck local up` (every agent on loopback) and the CDK
app (one stack per agent). An agent's `allow` list names the services it may
call back or dispatch to: a name of another agent in the file resolves to that
agent's URL (its local URL locally; on AWS the URL its stack publishes in SSM, found at
run time, unless `deploy.peer_urls` or `allowed_hosts` gives one).

Reading it is this module's: TOML, known keys and settings, types and ranges, each problem named by its TOML key
with a fix. The file's models are flightdeck.config_models; the check of what its agents need of each other and
of where they run is flightdeck.config_check (load_checked: both at once).
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

# Problem and ConfigFileError: what load and parse raise, named here for their callers.
from flightdeck.config_models import AgentSpec, DeploymentFile
from flightdeck.config_models import ConfigFileError as ConfigFileError
from flightdeck.config_models import Problem as Problem
from flightdeck.domain.invalid_value import InvalidValue
from flightdeck.settings import Settings

# --- reading and checking a deployment file ---------------------------------------------------------
#
# Hand-written on top of pydantic on purpose: pydantic finds what is wrong, but speaks of its
# own locations ("agents.critic.allow.0") and links to its documentation; a person editing the
# file needs the TOML key as they wrote it, and the fix. Problems are collected, never raised
# one at a time, so a file with three mistakes is answered with three lines, each once.


SETTING_NAMES: tuple[str, ...] = tuple(sorted(f.alias for f in Settings.model_fields.values() if f.alias))
# Powertools reads its own variables (POWERTOOLS_LOG_LEVEL, ...): passed through as they are.
PASSTHROUGH_PREFIX = "POWERTOOLS_"
# What a lone setting is validated against: the resource variables the stack or the local runtime sets.
_SETTINGS_BASE = {
    "AGENT_NAME": "check",
    "STATE_TABLE": "check-state",
    "TURN_WORKER_FUNCTION": "check-turn-worker",
    "TURNS_QUEUE_URL": "q",
    "DISPATCH_QUEUE_URL": "q",
    "DELIVERY_QUEUE_URL": "q",
    "TIMERS_QUEUE_URL": "q",
    "TOOL_CALLBACK_SECRET": "c" * 32,
}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_NAME_PATTERN = "^[a-z0-9][a-z0-9_-]*$"


def _dotted(parts: Sequence[object]) -> str:
    """Keys joined as TOML spells them ("a.b", a quoted "odd key"); a list position as [n]."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + (str(p) if _BARE_KEY.match(str(p)) else json.dumps(str(p)))
    return out


def _is_model(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, BaseModel)


def toml_key(loc: Sequence[object]) -> str:
    """The TOML key a pydantic location names, as the file spells it: ("agents", "critic", "allow")
    -> "[agents.critic].allow"; ("agents", "a", "delegates", 1, "agent") -> "[[agents.a.delegates]] #2 agent"."""
    tables: list[object] = []
    array = ""
    key: list[object] = []
    cls: Any = DeploymentFile
    items = list(loc)
    while items:
        part = items.pop(0)
        field = cls.model_fields.get(part) if _is_model(cls) and isinstance(part, str) else None
        if field is None:
            key = [part, *items]
            break
        annotation, origin = field.annotation, get_origin(field.annotation)
        if origin is dict:
            tables.append(part)
            value_type = get_args(annotation)[1]
            if _is_model(value_type) and items:
                tables.append(items.pop(0))
                cls = value_type
                continue
            key = list(items)  # a table of plain values: the rest is one of its keys
            break
        if origin is list and _is_model(get_args(annotation)[0]) and items and isinstance(items[0], int):
            array = f"[[{_dotted([*tables, part])}]] #{cast(int, items.pop(0)) + 1}"  # an int: checked above
            tables, cls = [], get_args(annotation)[0]
            continue
        if _is_model(annotation):
            tables.append(part)
            cls = annotation
            continue
        key = [part, *items]
        break
    if array:
        return f"{array} {_dotted(key)}" if key else array
    if not tables:
        return _dotted(key)
    return f"[{_dotted(tables)}]" + (f".{_dotted(key)}" if key else "")


def _model_at(loc: Sequence[object]) -> type[BaseModel] | None:
    """The model class of the table a location points into (None: a table of plain values)."""
    cls: Any = DeploymentFile
    items = list(loc)
    while items:
        part = items.pop(0)
        field = cls.model_fields.get(part) if _is_model(cls) and isinstance(part, str) else None
        if field is None:
            return None
        annotation, origin = field.annotation, get_origin(field.annotation)
        if origin in (dict, list):
            if not items:
                return None
            items.pop(0)
            cls = get_args(annotation)[-1]
        else:
            cls = annotation
    return cls if _is_model(cls) else None


def _show(value: Any) -> str:
    return (
        json.dumps(value, ensure_ascii=False, default=str)
        if isinstance(value, (str, int, float, bool))
        else type(value).__name__
    )


_TYPE_FIXES = {
    "int": "write a whole number, without quotes",
    "float": "write a number, without quotes",
    "bool": "write true or false, without quotes",
    "string": "write it as a quoted string",
    "list": 'write a list, e.g. ["a", "b"]',
    "dict": "write a table: a [section], or { key = value } inline",
    "model": "write a table: a [section], or { key = value } inline",
}


def _explain(err: ErrorDetails, example: str = "") -> tuple[str, str]:
    """(what is wrong, the fix) for one pydantic error, in the file's terms."""
    kind, ctx, given = err["type"], err.get("ctx") or {}, err.get("input")
    msg = str(err["msg"]).removeprefix("Value error, ")
    should = msg.replace("Input should be", "must be").replace("String should", "must").replace("List should", "must")
    got = f" (it is {_show(given)})" if not isinstance(given, (dict, list)) else ""
    for prefix, fix in _TYPE_FIXES.items():
        if kind.startswith(prefix + "_") and kind.endswith(("_type", "_parsing", "_from_float", "_attributes_type")):
            return f"{should.split(',')[0]}{got}", fix + (f", e.g. {example}" if example else "")
    if kind == "literal_error":
        expected = str(ctx.get("expected", "one of the listed values")).replace("'", '"')  # TOML quotes
        return f"must be {expected}{got}", f"write {expected}"
    bounds = {
        "greater_than": ("gt", "a number above {}"),
        "greater_than_equal": ("ge", "{} or more"),
        "less_than": ("lt", "a number below {}"),
        "less_than_equal": ("le", "at most {}"),
        "string_too_short": ("min_length", "at least {} characters"),
        "string_too_long": ("max_length", "at most {} characters"),
        "too_short": ("min_length", "at least {} entries"),
        "too_long": ("max_length", "at most {} entries"),
    }
    if kind in bounds:
        name, text = bounds[kind]
        return f"{should}{got}", "use " + text.format(ctx.get(name))
    if kind == "string_pattern_mismatch":
        if ctx.get("pattern") == _NAME_PATTERN:
            return (
                f"{_show(given)} is not a name",
                "use lower-case letters, digits, '-' and '_', starting with a letter or digit",
            )
        return f"{should}{got}", "change it to match that pattern"
    if kind == "missing":
        return "is required", "add it"
    if kind == "value_error" and "at least 32 characters" in msg:
        return msg, f"use 32 or more random characters, e.g. {_random_secret_hint()}"
    if kind == "value_error" and isinstance(ctx.get("error"), InvalidValue):
        return msg, ctx["error"].fix
    return msg, f"see what {kind} means for this key in docs/CONFIGURATION.md"


def _setting_problem(table: str, name: str, value: Any) -> Problem | None:
    """A setting of [defaults] or [agents.X.env]: known by name, of the right type and range."""
    key = f"{table}.{_dotted([name])}"
    if not isinstance(value, (str, int, float, bool)):
        return Problem(
            key, f"must be a string or a number, not a {type(value).__name__}", f'write {name} = "..." or a number'
        )
    if name not in SETTING_NAMES and not name.startswith(PASSTHROUGH_PREFIX):
        close = difflib.get_close_matches(name, SETTING_NAMES, n=1, cutoff=0.6)
        fix = (
            f"rename it to {close[0]}"
            if close
            else "remove it: an agent reads only the settings listed in docs/CONFIGURATION.md (flightdeck/settings.py)"
        )
        return Problem(key, "is not a setting", fix)
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    try:
        Settings.model_validate({**_SETTINGS_BASE, name: text})
    except ValidationError as exc:
        err = exc.errors()[0]
        default = next((f.default for f in Settings.model_fields.values() if f.alias == name), None)
        example = f"{name} = {default}" if isinstance(default, int) and not isinstance(default, bool) else ""
        message, fix = _explain(err, example)
        return Problem(key, message, fix)
    return None


def _settings_tables(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(TOML key, table) of every table of settings: [defaults] and each [agents.X.env]."""
    tables: list[tuple[str, dict[str, Any]]] = []
    if isinstance(raw.get("defaults"), dict):
        tables.append(("[defaults]", raw["defaults"]))
    agents = raw.get("agents")
    for name, spec in agents.items() if isinstance(agents, dict) else ():
        if isinstance(spec, dict) and isinstance(spec.get("env"), dict):
            tables.append((toml_key(("agents", name, "env")), spec["env"]))
    return tables


def _structure_problem(err: ErrorDetails) -> Problem:
    loc = tuple(err["loc"])
    key = toml_key(loc)
    if err["type"] == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = sorted(model.model_fields) if model else []
        name, parent = str(loc[-1]), toml_key(loc[:-1])
        is_table = isinstance(err.get("input"), dict)
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        if is_table and parent.startswith("[") and not parent.startswith("[[") and parent.endswith("]"):
            key = f"{parent[:-1]}.{_dotted([name])}]"
            fix = f"rename it to {parent[:-1]}.{close[0]}]" if close else f"remove it; {parent} has: {', '.join(known)}"
            return Problem(key, "unknown section", fix)
        fix = f'rename it to "{close[0]}"' if close else f"remove it; {parent or 'the file'} takes: {', '.join(known)}"
        return Problem(key, f'unknown key "{name}"', fix)
    if len(loc) == 3 and loc[0] == "agents" and loc[2] == "name" and err["type"] == "string_pattern_mismatch":
        return Problem(
            toml_key(loc[:2]),
            f"the agent name {_show(loc[1])} is not allowed",
            "rename the section: lower-case letters, digits, '-' and '_', starting with a letter or digit",
        )
    refused = (err.get("ctx") or {}).get("error")
    if isinstance(refused, InvalidValue) and refused.at:
        key = toml_key((*loc, *refused.at))  # the value itself, not only the table that refused it
    message, fix = _explain(err)
    return Problem(key, message, fix)


def parse(raw: dict[str, Any], path: str | Path = "<deployment>") -> DeploymentFile:
    """A deployment from the TOML document's data; ConfigFileError naming every mistake at once."""
    problems: list[Problem] = []
    agents = raw.get("agents", {})
    if isinstance(agents, dict):
        for name, spec in agents.items():
            if isinstance(spec, dict):
                spec.setdefault("name", name)
    for key, table in _settings_tables(raw):
        for name, value in list(table.items()):
            problem = _setting_problem(key, name, value)
            if problem is not None:
                problems.append(problem)
            table[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    try:
        # Strict: a deployment file says what it means ("2500" is not a number of milliseconds).
        deployment = DeploymentFile.model_validate(raw, strict=True)
    except ValidationError as exc:
        problems.extend(_structure_problem(err) for err in exc.errors(include_url=False))
        raise ConfigFileError.of(path, distinct(problems)) from None
    for name, spec in deployment.agents.items():
        if spec.name != name:
            problems.append(
                Problem(
                    toml_key(("agents", name, "name")),
                    f"is {spec.name!r}, not the section's name",
                    f"remove it (the name is the section's: [agents.{name}])",
                )
            )
        problems.extend(_secret_problems(name, spec))
    if problems:
        raise ConfigFileError.of(path, distinct(problems))
    return deployment


# The callback tokens' HMAC key: shorter, and the agents refuse to start (flightdeck.settings).
CALLBACK_SECRET_MIN_CHARS = 32


def _random_secret_hint() -> str:
    return "the output of python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def _secret_problems(name: str, spec: AgentSpec) -> list[Problem]:
    """A LOCAL ONLY callback_secret too short to be the HMAC key (the agents would not start, naming
    TOOL_CALLBACK_SECRET rather than this key)."""
    secret = spec.callback_secret
    if not secret or len(secret) >= CALLBACK_SECRET_MIN_CHARS:
        return []
    return [
        Problem(
            toml_key(("agents", name, "callback_secret")),
            f"is {len(secret)} characters: the callback tokens' HMAC key needs at least {CALLBACK_SECRET_MIN_CHARS}, "
            "or the agents do not start",
            f"make it {CALLBACK_SECRET_MIN_CHARS} or more random characters ({_random_secret_hint()}), or remove "
            "it: `flightdeck local` then makes one (on AWS it is generated in Secrets Manager)",
        )
    ]


def distinct(problems: Sequence[Problem]) -> list[Problem]:
    """Each problem once, in order (two checks may find the same one)."""
    return list(dict.fromkeys(problems))


def load(path: str | Path) -> DeploymentFile:
    """Read a deployment file: TOML syntax, known keys and settings, types and ranges (every agent's).

    What depends on where it runs (other agents named, tokens, the model) is `check`'s.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigFileError.of(
            path, [Problem("", "no such file", "check the path (--config FILE, -c config=FILE)")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError.of(
            path, [Problem("", f"cannot be read: {exc}", "check the path and its permissions")]
        ) from None
    try:
        raw: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError.of(
            path,
            [
                Problem(
                    "",
                    f"is not valid TOML: {exc}",
                    "correct the syntax there (key = value lines under [section] headers)",
                )
            ],
        ) from None
    return parse(raw, path)


# The repository's bundled example (functions/flightdeck/ -> repo root).
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "two-agents.toml"
