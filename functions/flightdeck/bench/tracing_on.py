"""What a function's first span costs when an OTLP endpoint is set (flightdeck.bench.coldstart, "tracing on"):
the OpenTelemetry SDK and OTLP/HTTP exporter imported, the provider made. Without an endpoint it is nothing."""

from flightdeck import tracing

assert tracing.enabled(), "the bench sets OTEL_EXPORTER_OTLP_ENDPOINT for this import"
