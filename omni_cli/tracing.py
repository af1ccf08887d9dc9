"""Where ``serve`` and ``bridge`` send their traces: OTLP over gRPC, off unless asked for.

Tracing is on when an endpoint is named: ``--otlp-endpoint`` (for ``serve`` also
``OMNI_GRPC_OTLP_ENDPOINT`` and the config file), else the standard
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``.
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turn it off whatever is named. The
exporter reads the other standard variables itself (``OTEL_EXPORTER_OTLP_HEADERS``,
``..._CERTIFICATE``, ``..._INSECURE``, ``..._COMPRESSION``), the provider reads
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER`` and the batch
processor's ``OTEL_BSP_*``.

The SDK and the exporter are imported only when tracing is on: a process that does not trace
builds no provider, and the server and bridge then hold no tracer at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

DEFAULT_SERVICE_NAME = "omni-grpc"
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def traces_endpoint(configured: str | None, environ: Mapping[str, str]) -> str | None:
    """The OTLP endpoint traces go to: the one configured, else the standard variables'; None
    when tracing is off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    named = [configured or "", *(environ.get(name, "") for name in _ENDPOINT_VARIABLES)]
    return next((endpoint.strip() for endpoint in named if endpoint.strip()), None)


def otlp_tracer_provider(endpoint: str, environ: Mapping[str, str]) -> TracerProvider:
    """A provider that batches spans to the OTLP/gRPC collector at ``endpoint``
    (``http://host:4317`` for plaintext, ``https://`` for TLS)."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME, when set, names the service; attributes given here would win over it.
    named = environ.get("OTEL_SERVICE_NAME", "").strip()
    resource = Resource.create({} if named else {SERVICE_NAME: DEFAULT_SERVICE_NAME})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


__all__ = ["DEFAULT_SERVICE_NAME", "otlp_tracer_provider", "traces_endpoint"]
