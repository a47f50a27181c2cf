# Triton Inference Server for CPUs, as servebench's local `triton-local` kind runs it, laid out
# like NVIDIA's nvcr.io/nvidia/tritonserver image so `triton-docker` runs it unchanged:
# `tritonserver` on PATH, backends in /opt/tritonserver/backends (the server's default
# --backend-directory). Built by docker/images.sh, which passes the versions of the host's
# .venv so the container runs the same server, python backend and onnxruntime as the host.
#
# The binary comes from the nvidia-pytriton wheel (NVIDIA publishes no CPU-only image and no
# registry may be reachable); its only backend is the python one, whose models (servebench's
# exports, model_zoo/export/triton_python_model.py) run onnxruntime inside the stub.
ARG BASE=docker.io/library/debian:bookworm-slim
FROM ${BASE}

ARG PYTRITON_VERSION
ARG ONNXRUNTIME_VERSION
ARG NUMPY_VERSION

# libpython3.11: the python backend's stub embeds the interpreter and links it.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv libpython3.11 \
    && rm -rf /var/lib/apt/lists/*

# The host's CA bundle arrives as a build secret (never a layer): pip needs it where HTTPS
# goes through an intercepting proxy. The wheel comes without its dependencies: they serve
# pytriton's Python API, while the server and the stub need only numpy and onnxruntime
# (a third of the download and ~100 MB less).
RUN --mount=type=secret,id=hostca,target=/host-ca.crt \
    test -n "$PYTRITON_VERSION" -a -n "$ONNXRUNTIME_VERSION" -a -n "$NUMPY_VERSION" \
    && if [ -s /host-ca.crt ]; then export PIP_CERT=/host-ca.crt; fi \
    && python3 -m venv /opt/venv \
    && pip="/opt/venv/bin/pip install -q --no-cache-dir --disable-pip-version-check" \
    && $pip --no-deps "nvidia-pytriton==${PYTRITON_VERSION}" \
    && $pip "onnxruntime==${ONNXRUNTIME_VERSION}" "numpy==${NUMPY_VERSION}"

# The official layout around the wheel's files. The binary is a link: its RPATH finds the
# bundled libraries relative to where it really lies. The backends folder is a copy with this
# Python's stub added (what servebench.servers.triton_install does for the local server).
RUN set -e; \
    site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
    pyver=$(/opt/venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
    wheel="$site/pytriton/tritonserver"; \
    mkdir -p /opt/tritonserver/bin; \
    ln -s "$wheel/bin/tritonserver" /opt/tritonserver/bin/tritonserver; \
    ln -s "$wheel/caches" /opt/tritonserver/caches; \
    cp -r "$wheel/backends" /opt/tritonserver/backends; \
    rm -rf /opt/tritonserver/backends/python/__pycache__; \
    cp "$wheel/python_backend_stubs/$pyver/triton_python_backend_stub" \
        /opt/tritonserver/backends/python/; \
    ln -s "$site/nvidia_pytriton.libs" /opt/tritonserver/lib

# Without the bundled libraries a model load hangs; without Debian's libdir the stub binds
# another libpython. The venv first on PATH: the stub finds numpy and onnxruntime through it.
ENV PATH=/opt/venv/bin:/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_LIBRARY_PATH=/opt/tritonserver/lib:/usr/lib/x86_64-linux-gnu
WORKDIR /opt/tritonserver
# Which model repository this image serves (servebench.servers.docker_triton reads it): the
# python-backend form servebench exports for triton-local, not the onnxruntime one that
# NVIDIA's image serves.
LABEL servebench.repository=python
