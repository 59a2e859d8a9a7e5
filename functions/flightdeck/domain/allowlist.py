"""The callback allowlist: logical service names mapped to fixed base URLs.

A peer names where its answer goes by a logical name; only names configured in
ALLOWED_HOST_MAPPING resolve. A raw URL is never accepted as a target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# Escapes a server or proxy may decode into a path separator or another escape: %2F "/", %5C a backslash,
# %25 "%" (double encoding). They have no business in a callback URL, so they are refused.
_AMBIGUOUS_ESCAPES = frozenset({"2F", "5C", "25"})
# What the HTTP client (requests.utils.requote_uri) leaves alone: quoting the rest with the same
# set makes the normalised URL a fixed point, so the URL sent is byte for byte the URL checked.
_SAFE = "!#$%&'()*+,/:;=?@[]~"


def _decode_unreserved(text: str) -> str | None:
    """RFC 3986 6.2.2: escapes of unreserved characters decoded (%2e is "."), others upper-cased;
    None when an ambiguous escape is present."""
    ambiguous = False

    def one(match: re.Match[str]) -> str:
        nonlocal ambiguous
        code = match.group(1).upper()
        char = chr(int(code, 16))
        if code in _AMBIGUOUS_ESCAPES:
            ambiguous = True
        return char if char in _UNRESERVED else f"%{code}"

    decoded = _PERCENT.sub(one, text)
    return None if ambiguous else decoded


def _remove_dot_segments(path: str) -> str | None:
    """RFC 3986 5.2.4 on an absolute path; None when a ".." would climb above the root."""
    out: list[str] = []
    segments = path.split("/")[1:]
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
        elif segment == "..":
            if not out:
                return None
            out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)


def normalise_url(url: str) -> str | None:
    """The one form of an http(s) URL that is checked against the allowlist and then sent, or None
    when it cannot be made unambiguous: user-info, control characters, spaces, backslashes, escaped
    separators, a non-ASCII host, a ".." above the root, or a dot segment hidden behind ";".

    Dot segments, literal or escaped (%2e), are resolved, so "/hooks/../admin" is "/admin"; scheme and
    host are lower-cased, a default port dropped, the fragment (never sent) dropped. Hand-written:
    urllib leaves dot segments and escapes alone, and the HTTP client resolves them only after our check.
    """
    if not isinstance(url, str) or any(c <= " " or c in "\\\x7f" for c in url) or _STRAY_PERCENT.search(url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in _DEFAULT_PORTS or not host or parts.username is not None or parts.password is not None:
        return None
    if not host.isascii() or "%" in host:
        return None
    path = _decode_unreserved(parts.path or "/")
    query = _decode_unreserved(parts.query)
    if path is None or query is None or not path.startswith("/"):
        return None
    path = _remove_dot_segments(path)
    if path is None:
        return None
    if any(segment.split(";")[0] in (".", "..") for segment in path.split("/")):
        return None  # "..;" is ".." to some servers
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    normalised = f"{scheme}://{netloc}{quote(path, safe=_SAFE)}"
    if query:
        normalised += "?" + quote(query, safe=_SAFE)
    return normalised


class AllowlistError(ValueError):
    """A malformed ALLOWED_HOST_MAPPING entry."""


class UnknownServiceError(LookupError):
    """A service name that is not on the allowlist (fail closed)."""


def _check_base_url(name: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise AllowlistError(f"entry {name!r}: base URL must be http(s), got {url!r}")
    if not parts.hostname:
        raise AllowlistError(f"entry {name!r}: base URL has no host: {url!r}")
    if parts.username is not None or parts.password is not None:
        raise AllowlistError(f"entry {name!r}: base URL must not carry user-info")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise AllowlistError(f"entry {name!r}: base URL must not have a query or fragment")
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        raise AllowlistError(f"entry {name!r}: bad port in {url!r}") from exc
    normalised = normalise_url(url)
    if normalised is None:
        raise AllowlistError(
            f"entry {name!r}: base URL has escaped separators, backslashes or other ambiguous characters: {url!r}"
        )
    if urlsplit(normalised).path.rstrip("/") != parts.path.rstrip("/"):
        # A base is compared in its normal form: one written otherwise ("/x/../y") says two things.
        raise AllowlistError(f"entry {name!r}: write the base URL's path in its normal form: {normalised!r}")
    return url.rstrip("/")


# The endpoints a service may have besides its base URL: an agent on the lean front door serves its peers'
# round trip from Lambda function URLs, one per function (flightdeck.topology.URL_HANDLERS names them).
CHAT_ENDPOINT = "chat_ingest"  # POST /api/chat, and a delegate session's cancel
CALLBACK_ENDPOINT = "callback"  # POST /api/tools/response(s), POST /api/a2a/push
ENDPOINTS = (CHAT_ENDPOINT, CALLBACK_ENDPOINT, "a2a", "session_events")


def parse_urls(name: str, text: str) -> tuple[str, dict[str, str]]:
    """`baseUrl [endpoint=url ...]`: the base URL and the endpoints' own URLs, each checked as a base URL is.
    Whitespace separates them (a URL cannot hold it: normalise_url refuses it)."""
    base, *rest = text.split()
    return _check_base_url(name, base), parse_endpoints(name, " ".join(rest))


def parse_endpoints(name: str, text: str) -> dict[str, str]:
    """`endpoint=url ...` (whitespace-separated), each URL checked as a base URL is."""
    endpoints: dict[str, str] = {}
    for part in text.split():
        endpoint, sep, url = part.partition("=")
        if not sep or endpoint not in ENDPOINTS:
            raise AllowlistError(f"entry {name!r}: {part!r} is not endpoint=url (endpoints: {', '.join(ENDPOINTS)})")
        if endpoint in endpoints:
            raise AllowlistError(f"entry {name!r}: endpoint {endpoint!r} is given twice")
        endpoints[endpoint] = _check_base_url(f"{name} {endpoint}", url)
    return endpoints


@dataclass(frozen=True)
class Allowlist:
    services: dict[str, str] = field(default_factory=dict)
    # name -> endpoint -> URL: where a service's round-trip routes live when not under its base URL (a peer on
    # the lean front door). Each is fixed configuration or its own published value, never a caller's word.
    endpoints: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Allowlist:
        """Parse `name:baseUrl,name:baseUrl [endpoint=url ...]`; each entry splits on its first colon."""
        services: dict[str, str] = {}
        endpoints: dict[str, dict[str, str]] = {}
        for raw in text.split(","):
            entry = raw.strip()
            if not entry:
                continue
            name, sep, url = entry.partition(":")
            name, url = name.strip(), url.strip()
            if not sep or not url:
                raise AllowlistError(f"entry {entry!r} is not name:baseUrl")
            if not _NAME.match(name):
                raise AllowlistError(f"entry {entry!r}: {name!r} is not a service name")
            if name in services:
                raise AllowlistError(f"service {name!r} is listed twice")
            services[name], own = parse_urls(name, url)
            if own:
                endpoints[name] = own
        return cls(services, endpoints)

    def resolve(self, name: str, endpoint: str = "") -> str:
        """The base URL for a service name (or where its `endpoint` lives, when it has its own URL for it);
        anything not listed is refused."""
        try:
            base = self.services[name]
        except (KeyError, TypeError):
            raise UnknownServiceError(f"callbackService {name!r} is not an allowed service") from None
        return self.endpoints.get(name, {}).get(endpoint, base)

    def __contains__(self, name: object) -> bool:
        return name in self.services

    def check_url(self, url: str) -> str | None:
        """The normalised URL (normalise_url) when it lies under one of the configured base URLs (same
        scheme, host, port, path prefix), else None. Send what this returns, never the URL given."""
        normalised = normalise_url(url)
        if normalised is None:
            return None
        target = urlsplit(normalised)
        bases = [*self.services.values(), *(u for own in self.endpoints.values() for u in own.values())]
        for base in bases:
            b = urlsplit(normalise_url(base) or "")
            if (target.scheme, target.hostname, target.port) != (b.scheme, b.hostname, b.port):
                continue
            prefix = b.path.rstrip("/")
            if target.path == prefix or target.path.startswith(prefix + "/"):
                return normalised
        return None

    def allows_url(self, url: str) -> bool:
        return self.check_url(url) is not None

    def to_env(self) -> str:
        return ",".join(
            " ".join([f"{n}:{u}", *(f"{e}={v}" for e, v in self.endpoints.get(n, {}).items())])
            for n, u in self.services.items()
        )
