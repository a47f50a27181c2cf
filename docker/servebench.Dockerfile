# servebench's own container: the overhead probes' "container" side, and a place to run a
# scenario inside a container. Built by docker/images.sh.
#
# It installs neither Python packages nor servebench: at run time the host's interpreter
# prefix, the project's .venv and the project folder are bind-mounted read-only at the same
# paths (docker/README.md shows the command), so host and container run the very same
# interpreter, torch, numpy and BLAS and a measured difference is the container's, not a
# second build's (a pip install here would also fetch torch's multi-GB CUDA build). What the
# image adds is what those mounts need from the OS and the probes' native tools.
ARG BASE=docker.io/library/debian:bookworm-slim
FROM ${BASE}

# The BLAS package the host's hpcc runs on (images.sh reads the host's libblas.so.3
# alternative), so HPL compares like with like.
ARG BLAS_PACKAGE=libblas3

# - hpcc (HPL, DGEMM, STREAM, RandomAccess; with its MPI), ioping and fio: the probes' tools.
# - the shared libraries the mounted interpreter and the venv's compiled extensions link
#   (found with ldd on the host: python's lib-dynload, torch, onnxruntime, tensorflow, scipy,
#   tritonserver; the wheels bundle the rest).
# - python3.11: on hosts whose interpreter is Debian's own (sys.base_prefix /usr, which
#   cannot be mounted over the image's /usr) the venv runs on this one, the same package.
# - procps: ps/top/free for looking inside a running probe.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        hpcc "${BLAS_PACKAGE}" ioping fio procps \
        python3.11 \
        libbz2-1.0 libcrypt1 libffi8 libgcc-s1 liblzma5 libncursesw6 libnsl2 libreadline8 \
        libsqlite3-0 libssl3 libstdc++6 libuuid1 zlib1g \
    && rm -rf /var/lib/apt/lists/*

CMD ["/bin/bash"]
