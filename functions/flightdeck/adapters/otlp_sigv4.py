"""OTLP/HTTP to X-Ray's OTLP endpoint (https://xray.REGION.amazonaws.com/v1/traces): each export request signed
with SigV4 (service xray) by botocore, with the function's own credentials. The OpenTelemetry exporter sends
through this session; nothing else changes (docs/TRACING.md says why not the ADOT layer)."""

from __future__ import annotations

import re
from typing import Any

import requests

XRAY_OTLP = re.compile(r"^https://xray\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?/v1/traces$")


def xray_region(endpoint: str) -> str | None:
    """The region of an X-Ray OTLP traces endpoint, None for any other collector."""
    match = XRAY_OTLP.match(endpoint.strip())
    return match.group(1) if match else None


class SigV4Session(requests.Session):
    """A requests session that signs what it sends for X-Ray, in one region."""

    def __init__(self, region: str):
        super().__init__()
        import botocore.session

        self._region = region
        self._credentials = botocore.session.Session().get_credentials()

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        data = kwargs.get("data")
        signed = AWSRequest(
            method=method, url=url, data=data, headers={**self.headers, **(kwargs.get("headers") or {})}
        )
        if self._credentials is None:
            raise RuntimeError("no AWS credentials to sign the spans' export to X-Ray with")
        SigV4Auth(self._credentials, "xray", self._region).add_auth(signed)
        kwargs["headers"] = dict(signed.headers.items())
        return super().request(method, url, *args, **kwargs)
