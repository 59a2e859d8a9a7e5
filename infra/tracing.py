"""OpenTelemetry spans to X-Ray's OTLP endpoint (context `traces=xray`; docs/TRACING.md).

Every function gets the standard OTEL_* variables (X-Ray's OTLP traces URL in the stack's region, a
parent-based ratio sampler) and may put spans (xray:PutSpans, which has no resource-level permission).
The exporter signs with SigV4 (flightdeck.adapters.otlp_sigv4). Off by default: X-Ray's OTLP endpoint needs
the account's Transaction Search on, which is the account's choice, not a stack's.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws
from aws_cdk import aws_iam as iam

from flightdeck import tracing

from .functions import Functions

DEFAULT_SAMPLE_RATIO = 0.05


def trace_settings(context: Any) -> float | None:
    """The sampling ratio when the context asks for traces to X-Ray (`traces=xray`), else None."""
    traces = context("traces")
    if traces in (None, "", "off"):
        return None
    if traces != "xray":
        raise ValueError(f"context traces={traces!r}: 'xray' or 'off'")
    ratio = context("traceSampleRatio")
    value = DEFAULT_SAMPLE_RATIO if ratio is None else float(ratio)
    if not 0 <= value <= 1:
        raise ValueError(f"context traceSampleRatio={ratio!r}: a ratio from 0 to 1")
    return value


def export_traces_to_xray(functions: Functions, ratio: float) -> None:
    variables = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"https://xray.{Aws.REGION}.amazonaws.com/v1/traces",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": str(ratio),
        "OTEL_SEMCONV_STABILITY_OPT_IN": tracing.SEMCONV_OPT_IN,
    }
    for handler, function in functions.functions.items():
        for name, value in variables.items():
            function.add_environment(name, value)
        functions.roles[handler].add_to_policy(iam.PolicyStatement(actions=["xray:PutSpans"], resources=["*"]))
