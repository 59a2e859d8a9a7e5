"""The callback allowlist: logical service names mapped to fixed base URLs.

A peer names where its answer goes by a logical name; only names configured in
ALLOWED_HOST_MAPPING resolve. A raw URL is never accepted as a target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


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
    return url.rstrip("/")


@dataclass(frozen=True)
class Allowlist:
    services: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> "Allowlist":
        """Parse `name:baseUrl,name:baseUrl`; each entry splits on its first colon."""
        services: dict[str, str] = {}
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
            services[name] = _check_base_url(name, url)
        return cls(services)

    def resolve(self, name: str) -> str:
        """The base URL for a service name; anything not listed is refused."""
        try:
            return self.services[name]
        except (KeyError, TypeError):
            raise UnknownServiceError(f"callbackService {name!r} is not an allowed service") from None

    def __contains__(self, name: object) -> bool:
        return name in self.services

    def allows_url(self, url: str) -> bool:
        """True when url lies under one of the configured base URLs (same scheme, host, port, path prefix)."""
        target = urlsplit(url)
        if target.username is not None or target.password is not None:
            return False
        for base in self.services.values():
            b = urlsplit(base)
            if (target.scheme, target.hostname, target.port) != (b.scheme, b.hostname, b.port):
                continue
            prefix = b.path.rstrip("/")
            if target.path == prefix or target.path.startswith(prefix + "/"):
                return True
        return False

    def to_env(self) -> str:
        return ",".join(f"{n}:{u}" for n, u in self.services.items())
