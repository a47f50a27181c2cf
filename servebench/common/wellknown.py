"""The ports the serving systems listen on unless told otherwise, written once.

Two layers need them and neither may import the other: `clients.registry` (a protocol's
default address and the server's default metrics page) and the container launchers in
`servers` (the ports inside the official containers, which those images use). Like
`results` and `linux`, it imports nothing of servebench, so every layer may read it.
"""

from __future__ import annotations

# Triton Inference Server: KServe v2 HTTP, KServe v2 gRPC, Prometheus metrics.
TRITON_HTTP_PORT = 8000
TRITON_GRPC_PORT = 8001
TRITON_METRICS_PORT = 8002
# TensorFlow Serving: gRPC PredictionService, REST API (its metrics are a REST path).
TFS_GRPC_PORT = 8500
TFS_REST_PORT = 8501

# Where `docker/engine.sh up` serves podman's Docker Engine API when no Docker engine
# answers; the docker launchers look here when DOCKER_HOST is unset and Docker's own
# socket is absent (the path is also in docker/engine.sh).
PODMAN_SOCKET = "unix:///run/servebench-engine/podman.sock"
# Images `docker/images.sh` builds locally (no registry needed): Triton's CPU server as the
# local `triton-local` kind runs it, and servebench itself (the overhead probes' container).
TRITON_CPU_IMAGE = "localhost/servebench-triton-cpu:latest"
SERVEBENCH_IMAGE = "localhost/servebench:latest"
