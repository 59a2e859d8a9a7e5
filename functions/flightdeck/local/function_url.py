"""A Lambda function URL's event (payload format 2.0), as the lean front door delivers it on AWS.

With `front_door = "lean"` the local gateway hands the requests a function URL serves on AWS
(topology.URL_HANDLERS' buffered routes) to their function in this shape, so the handlers' second
event shape runs locally too (docs/FRONT_DOORS.md). The shape is AWS's documented one: headers
lower-cased and repeated ones joined with commas, cookies apart, no resource and no path parameters
(routeKey "$default": the function finds its route from rawPath).
"""

from __future__ import annotations

import base64
import secrets
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

# What a URL's requestContext says for a caller that signed nothing (AuthType NONE).
ANONYMOUS = "anonymous"


def _body(body: bytes) -> tuple[str | None, bool]:
    if not body:
        return None, False
    try:
        return body.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), True


def build_function_url_event(
    *,
    method: str,
    raw_path: str,
    query_string: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    source_ip: str,
    url_id: str,
    now: float | None = None,
) -> dict[str, Any]:
    """The event a function URL (AuthType NONE) sends its function for one request."""
    now = time.time() if now is None else now
    joined: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "cookie":
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
            continue
        joined[key] = f"{joined[key]},{value}" if key in joined else value
    joined.setdefault("x-forwarded-for", source_ip)
    joined.setdefault("x-forwarded-proto", "http")
    joined.setdefault("x-amzn-trace-id", f"Root=1-{int(now):08x}-{secrets.token_hex(12)}")
    query: dict[str, str] = {}
    for name, value in parse_qsl(query_string, keep_blank_values=True):
        query[name] = f"{query[name]},{value}" if name in query else value
    event_body, is_base64 = _body(body)
    domain = joined.get("host") or f"{url_id}.lambda-url.local"
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": query_string,
        "headers": joined,
        "requestContext": {
            "accountId": ANONYMOUS,
            "apiId": url_id,
            "domainName": domain,
            "domainPrefix": domain.split(".")[0].split(":")[0],
            "http": {
                "method": method,
                "path": raw_path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": joined.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": datetime.fromtimestamp(now, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": is_base64,
    }
    if cookies:
        event["cookies"] = cookies
    if query:
        event["queryStringParameters"] = query
    if event_body is not None:
        event["body"] = event_body
    return event
