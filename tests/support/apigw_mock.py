"""API Gateway's rendering of the console's MOCK response templates (infra/console.py), for the tests: the
Velocity the templates use is `#set($context.responseOverride.header.NAME = "...")`, `$util.base64Decode("...")`
and `$context.stage`, nothing else (anything else would be Velocity's to interpret, so it is refused here)."""

from __future__ import annotations

import base64
import re

_SET = re.compile(r'#set\(\$context\.responseOverride\.header\.([A-Za-z-]+) = "([^"$#]*)"\)')
_PART = re.compile(r'(\$util\.base64Decode\("[A-Za-z0-9+/=]*"\)|\$context\.stage)')


def render(template: str, stage: str) -> tuple[dict[str, str], str]:
    """(headers the template sets, body) as API Gateway answers them."""
    headers = {}
    while match := _SET.match(template):
        headers[match.group(1)] = match.group(2)
        template = template[match.end() :]
    parts = _PART.split(template)
    if any(parts[::2]):
        raise ValueError(f"a template with more than this renderer knows: {template[:120]!r}")
    body = "".join(
        stage if p == "$context.stage" else base64.b64decode(p[len('$util.base64Decode("') : -2]).decode()
        for p in parts[1::2]
    )
    return headers, body
