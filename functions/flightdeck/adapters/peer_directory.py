"""Run-time peer discovery: an allowed service name resolves to the URL its stack published.

On AWS every agent's stack writes its API URL into one SSM String parameter,
`<PEER_URL_PARAMETER_PREFIX>/<agent>/api-url` (flightdeck.topology); on the lean front door the value
also names its function URLs (`<HTTP API URL> chat_ingest=<url> callback=<url> ...`, Allowlist.parse):
one parameter, one read, whichever door the peer has. An agent's
DISCOVERED_PEERS are the allowed names whose URL it looks up there when it first
needs one, instead of having it in ALLOWED_HOST_MAPPING: the allowlist stays a
list of names, no stack references another, and the stacks deploy in any order.

- A name with a URL in ALLOWED_HOST_MAPPING never reaches SSM (configured wins).
- A name whose parameter does not exist yet (that agent is not deployed) is
  refused like an unknown service (fail closed); the next call asks again, since
  Powertools caches values, not failures.
- A value that is not a valid base URL is refused the same way: whatever is in
  the parameter is checked exactly as ALLOWED_HOST_MAPPING entries are.
- Any other failure (AccessDenied, throttling) raises: the message is retried by
  SQS or answered 503, and a missing permission shows in the logs at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flightdeck import topology
from flightdeck.domain.allowlist import Allowlist, AllowlistError, UnknownServiceError

if TYPE_CHECKING:
    from flightdeck.settings import Settings

# Powertools caches each URL this long. A URL changes only when a peer's stack is destroyed and
# created again; warm functions then use the old one for at most this long.
PEER_URL_MAX_AGE_S = 300


class PeerUrlParameters:
    """`name -> published base URL or None`, through Powertools parameters (SSM GetParameter, cached)."""

    def __init__(self, prefix: str, max_age_s: int = PEER_URL_MAX_AGE_S, client: Any = None):
        self.prefix = prefix
        self.max_age_s = max_age_s
        self._client = client
        self._provider: Any = None

    def parameter_name(self, service: str) -> str:
        return topology.peer_url_parameter(self.prefix, service)

    def __call__(self, service: str) -> str | None:
        from aws_lambda_powertools.utilities import parameters
        from botocore.exceptions import ClientError

        if self._provider is None:  # built on first use: functions that never resolve a peer never need SSM
            self._provider = parameters.SSMProvider(boto3_client=self._client)
        try:
            value = self._provider.get(self.parameter_name(service), max_age=self.max_age_s)
        except parameters.exceptions.GetParameterError as exc:
            cause = exc.__context__  # Powertools re-raises every SDK error as GetParameterError
            if isinstance(cause, ClientError) and cause.response.get("Error", {}).get("Code") == "ParameterNotFound":
                return None
            raise
        return str(value) if value else None


@dataclass(frozen=True)
class DiscoveringAllowlist(Allowlist):
    """An Allowlist whose `discovered` names get their base URL from `lookup` when asked.

    A subclass, so the domain keeps calling resolve/allows_url on settings.allowed_host_mapping
    and knows nothing of SSM; `services` keeps the configured entries alone.
    """

    discovered: tuple[str, ...] = ()
    lookup: Callable[[str], str | None] = field(default=lambda _name: None, compare=False, repr=False)

    def _found(self, name: str) -> Allowlist | None:
        """What `name` published: its base URL, and on the lean front door its function URLs
        (`base endpoint=url ...`), checked as configured entries are; None when nothing valid is there."""
        url = self.lookup(name)
        if not url:
            return None
        try:
            return Allowlist.parse(f"{name}:{url}")
        except AllowlistError:
            return None

    def resolve(self, name: str, endpoint: str = "") -> str:
        if name in self.services or name not in self.discovered:
            return super().resolve(name, endpoint)
        found = self._found(name)
        if found is None:
            raise UnknownServiceError(
                f"service {name!r} is allowed but has no published URL yet (not deployed, or the parameter "
                "holds no valid base URL)"
            )
        return found.resolve(name, endpoint)

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or name in self.discovered

    def allows_url(self, url: str) -> bool:
        if super().allows_url(url):
            return True
        return any(
            found.allows_url(url)
            for n in self.discovered
            if n not in self.services and (found := self._found(n)) is not None
        )


def with_discovered_peers(settings: Settings, lookup: Callable[[str], str | None] | None = None) -> Settings:
    """The settings with an allowlist that also resolves DISCOVERED_PEERS (unchanged without any)."""
    names = tuple(n for n in settings.discovered_peers if n not in settings.allowed_host_mapping.services)
    if not names:
        return settings
    allowlist = DiscoveringAllowlist(
        services=dict(settings.allowed_host_mapping.services),
        endpoints=dict(settings.allowed_host_mapping.endpoints),
        discovered=names,
        lookup=lookup or PeerUrlParameters(settings.peer_url_parameter_prefix),
    )
    return settings.model_copy(update={"allowed_host_mapping": allowlist})
