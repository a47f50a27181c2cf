#!/usr/bin/env bash
# servebench's container images, built locally so no registry is needed.
#
#   docker/images.sh [base|triton|servebench|all] [--force]     (default: all)
#
#   base        the Debian bookworm base: the official debian:bookworm-slim where a registry
#               answers, else localhost/servebench-debian-base:bookworm made with debootstrap
#               from the Debian mirror apt already uses
#   triton      TRITON_CPU_IMAGE: the nvidia-pytriton wheel's tritonserver, its python backend
#               and onnxruntime, at the versions of the project's .venv (docker/triton-cpu.Dockerfile)
#   servebench  SERVEBENCH_IMAGE: the OS side of the overhead probes (docker/servebench.Dockerfile)
#
# Every image carries the label servebench.recipe, a hash of what it is built from (its
# Dockerfile, build arguments and base image); an image whose label matches is left alone, so
# a second run with nothing changed takes seconds. --force rebuilds the named images from
# scratch. The engine is the one docker/engine.sh provides (started here if none answers);
# with its podman the podman CLI builds, with a Docker engine the docker CLI (BuildKit).
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER_DIR=docker
# The names servebench's code uses, read from where they are defined.
image_name() { sed -n "s/^$1 = \"\(.*\)\"$/\1/p" servebench/common/wellknown.py; }
TRITON_IMAGE=$(image_name TRITON_CPU_IMAGE)
SERVEBENCH_IMAGE=$(image_name SERVEBENCH_IMAGE)
OFFICIAL_BASE=docker.io/library/debian:bookworm-slim
LOCAL_BASE=localhost/servebench-debian-base:bookworm
SUITE=bookworm
RECIPE_LABEL=servebench.recipe
VENV_PYTHON=${VENV_PYTHON:-.venv/bin/python}
HOST_CA=/etc/ssl/certs/ca-certificates.crt
PULL_TIMEOUT_S=${PULL_TIMEOUT_S:-30}

say() { echo "images.sh: $*" >&2; }
die() { say "$*"; exit 1; }
usage() { echo "usage: $0 [base|triton|servebench|all] [--force]" >&2; exit 2; }

target=all
force=false
for arg in "$@"; do
  case "$arg" in
    base | triton | servebench | all) target=$arg ;;
    --force) force=true ;;
    *) usage ;;
  esac
done
[ -n "$TRITON_IMAGE" ] && [ -n "$SERVEBENCH_IMAGE" ] \
  || die "image names not found in servebench/common/wellknown.py"

# --- the engine and the CLI that talks to it -------------------------------------------------
eval "$("$DOCKER_DIR/engine.sh" up)"
eval "$("$DOCKER_DIR/engine.sh" env)"
if [ "$DOCKER_HOST" = "unix://$(dirname "$CONTAINERS_CONF")/podman.sock" ]; then
  ENGINE_CLI=podman
else
  unset CONTAINERS_CONF
  command -v docker >/dev/null || die "a Docker engine answers at $DOCKER_HOST but the docker CLI is not installed"
  export DOCKER_BUILDKIT=1 # RUN --mount=type=secret needs BuildKit
  ENGINE_CLI=docker
fi
engine() { "$ENGINE_CLI" "$@"; }

image_id() { engine image inspect --format '{{.Id}}' "$1" 2>/dev/null; }
recipe_of() { engine image inspect --format "{{ index .Config.Labels \"$RECIPE_LABEL\" }}" "$1" 2>/dev/null || true; }
sha() { sha256sum | cut -c1-64; }

# Earlier builds of these images, untagged by a rebuild, are removed once no container uses
# them (now or on a later run), so rebuilds leave no litter; an old base goes once the old
# images built on it have gone, hence the passes.
sweep_replaced() {
  local pass id removed
  for pass in 1 2 3; do
    removed=false
    for id in $(engine images -q --filter dangling=true --filter "label=$RECIPE_LABEL"); do
      engine rmi "$id" >/dev/null 2>&1 && removed=true
    done
    $removed || break
  done
}

# --- base --------------------------------------------------------------------------------------
# The Debian mirror apt uses on this host (deb822 sources), else Debian's redirector.
debian_mirror() {
  local sources=/etc/apt/sources.list.d/debian.sources mirror=""
  [ -f "$sources" ] && mirror=$(awk -v RS= -v suite="$SUITE" '
    $0 ~ ("Suites:[^\n]*[ \t]" suite "([ \t\n]|$)") {
      if (match($0, /URIs:[ \t]*[^ \t\n]+/)) { split(substr($0, RSTART, RLENGTH), f, /[ \t]+/); print f[2]; exit }
    }' "$sources")
  echo "${mirror:-http://deb.debian.org/debian}"
}

# debootstrap's minimal Debian, made to look like the official slim image: the host's apt
# sources, no package lists or caches, and dpkg told to skip docs, man pages and locales.
build_debian_base() {
  local recipe=$1 mirror rootfs
  [ "$(id -u)" = 0 ] || die "building the Debian base needs root (debootstrap); or use Docker with a registry"
  command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
  mirror=$(debian_mirror)
  rootfs=$(mktemp -d /var/tmp/servebench-rootfs.XXXXXX)
  # shellcheck disable=SC2064 # expand now: the path is fixed
  trap "grep -o \" $rootfs/[^ ]*\" /proc/mounts | sort -r | xargs -r umount -l; rm -rf --one-file-system '$rootfs'" EXIT
  say "debootstrap --variant=minbase $SUITE from $mirror"
  debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -n 20 "$rootfs.log" >&2; rm -f "$rootfs.log"; die "debootstrap failed"; }
  rm -f "$rootfs.log"
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
    rm -f "$rootfs/etc/apt/sources.list"
  fi
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/servebench-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
  cat >"$rootfs/etc/apt/apt.conf.d/servebench-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
EOF
  find "$rootfs/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/man/* \
    "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log "$rootfs"/tmp/*
  tar -C "$rootfs" -c . | engine import --change "LABEL $RECIPE_LABEL=$recipe" - "$LOCAL_BASE" \
    >"$rootfs.log" 2>&1 || { cat "$rootfs.log" >&2; rm -f "$rootfs.log"; die "importing the root filesystem failed"; }
  rm -f "$rootfs.log"
  rm -rf --one-file-system "$rootfs"
  trap - EXIT
}

# Sets BASE_REF: the official image if present or pullable, else ours (built when its recipe
# changed). A pull is only tried when neither exists, or with --force.
ensure_base() {
  local force_base=$1 recipe started
  recipe=$({ declare -f build_debian_base; debian_mirror; cat /etc/apt/sources.list.d/debian.sources 2>/dev/null || true; } | sha)
  if ! $force_base && image_id "$OFFICIAL_BASE" >/dev/null; then
    BASE_REF=$OFFICIAL_BASE
  elif ! $force_base && [ "$(recipe_of "$LOCAL_BASE")" = "$recipe" ]; then
    BASE_REF=$LOCAL_BASE
  elif timeout "$PULL_TIMEOUT_S" "$ENGINE_CLI" pull -q "$OFFICIAL_BASE" >/dev/null 2>&1; then
    BASE_REF=$OFFICIAL_BASE
    say "pulled $OFFICIAL_BASE"
  else
    say "no registry answers ($OFFICIAL_BASE cannot be pulled): building $LOCAL_BASE"
    started=$SECONDS
    build_debian_base "$recipe"
    say "$LOCAL_BASE built in $((SECONDS - started)) s"
    BASE_REF=$LOCAL_BASE
    return
  fi
  say "base: $BASE_REF (up to date)"
}

# --- images from Dockerfiles -----------------------------------------------------------------
# build_image REF DOCKERFILE [--build-arg K=V ...]: skipped when REF's recipe label matches.
build_image() {
  local ref=$1 dockerfile=$2 recipe log started secret=() cache=()
  shift 2
  recipe=$({ cat "$dockerfile"; printf '%s\n' "$@"; image_id "$BASE_REF"; } | sha)
  if ! $force && [ "$(recipe_of "$ref")" = "$recipe" ]; then
    say "$ref: up to date"
    return
  fi
  [ -s "$HOST_CA" ] && secret=(--secret "id=hostca,src=$HOST_CA")
  $force && cache=(--no-cache)
  log=$(mktemp /tmp/servebench-build.XXXXXX.log)
  started=$SECONDS
  say "building $ref from $dockerfile on $BASE_REF"
  engine build --network=host "${secret[@]}" "${cache[@]}" -f "$dockerfile" \
    --build-arg "BASE=$BASE_REF" "$@" --label "$RECIPE_LABEL=$recipe" -t "$ref" "$DOCKER_DIR" \
    >"$log" 2>&1 || { tail -n 30 "$log" >&2; die "building $ref failed (whole log: $log)"; }
  rm -f "$log"
  say "$ref built in $((SECONDS - started)) s"
}

# Versions of the host's venv, so the container serves with the same code as `triton-local`.
venv_version() {
  [ -x "$VENV_PYTHON" ] || die "$VENV_PYTHON not found: the Triton image takes its versions from the project's venv (make install)"
  "$VENV_PYTHON" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null \
    || die "$1 is not installed in $VENV_PYTHON's environment (make install)"
}

build_triton() {
  build_image "$TRITON_IMAGE" "$DOCKER_DIR/triton-cpu.Dockerfile" \
    --build-arg "PYTRITON_VERSION=$(venv_version nvidia-pytriton)" \
    --build-arg "ONNXRUNTIME_VERSION=$(venv_version onnxruntime)" \
    --build-arg "NUMPY_VERSION=$(venv_version numpy)"
}

# The Debian package behind the host's libblas.so.3 (what its hpcc runs on); libblas3, the
# package hpcc's dependency names first, where the host has none.
host_blas_package() {
  local lib package
  lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null) \
    && package=$(dpkg -S "$lib" 2>/dev/null | head -n 1 | cut -d: -f1)
  echo "${package:-libblas3}"
}

build_servebench() {
  build_image "$SERVEBENCH_IMAGE" "$DOCKER_DIR/servebench.Dockerfile" \
    --build-arg "BLAS_PACKAGE=$(host_blas_package)"
}

case "$target" in
  base) ensure_base "$force" ;;
  triton) ensure_base false && build_triton ;;
  servebench) ensure_base false && build_servebench ;;
  all) ensure_base "$force" && build_triton && build_servebench ;;
esac
sweep_replaced
engine images --format '{{.Repository}}:{{.Tag}} {{.Size}}' \
  | grep -F -e "$TRITON_IMAGE " -e "$SERVEBENCH_IMAGE " -e "$LOCAL_BASE " -e "$OFFICIAL_BASE " >&2 || true
