"""Seeing what the scheduler does: log fields, Prometheus metrics, OpenTelemetry
tracing."""
