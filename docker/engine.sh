#!/usr/bin/env bash
# A container engine that speaks the Docker Engine API, on any machine servebench runs on.
#
#   docker/engine.sh up       use the Docker engine that answers, or provision rootful podman
#                             (Debian packages podman + runc + debootstrap) and serve its
#                             Docker-compatible API on a unix socket; prints `export DOCKER_HOST=...`
#   docker/engine.sh status   which engine answers, and where
#   docker/engine.sh down     stop the podman API service this script started
#   docker/engine.sh env      print the CONTAINERS_CONF export for calling podman by hand
#
# Why podman's settings differ from its defaults (ENVIRONMENT.md, "Containers"): its default
# runtime crun fails on these cgroup-v1 hybrid hosts, and the default ulimits exceed what a
# process without CAP_SYS_RESOURCE may set, so runc and lower limits come from a private
# containers.conf that every podman call here (the API service included) is given.
# servebench finds the socket by itself (servebench/common/wellknown.py PODMAN_SOCKET) when
# DOCKER_HOST is unset, so `eval "$(docker/engine.sh up)"` is only needed for other tools.
set -euo pipefail

STATE_DIR=${SERVEBENCH_ENGINE_DIR:-/run/servebench-engine}
SOCKET="$STATE_DIR/podman.sock"
CONF="$STATE_DIR/containers.conf"
PID_FILE="$STATE_DIR/service.pid"
LOG_FILE="$STATE_DIR/service.log"

say() { echo "engine.sh: $*" >&2; }

# True when a Docker Engine API answers on the given unix socket (path, not URL).
answers() {
  [ -S "$1" ] && curl -sf --max-time 3 --unix-socket "$1" http://d/_ping >/dev/null 2>&1
}

# The socket of an engine that already answers: DOCKER_HOST, Docker's default, ours.
answering_socket() {
  local host=${DOCKER_HOST:-}
  if [ -n "$host" ]; then
    case "$host" in
      unix://*) answers "${host#unix://}" && { echo "${host#unix://}"; return 0; } ;;
      *) curl -sf --max-time 3 "http://${host#tcp://}/_ping" >/dev/null 2>&1 && { echo "$host"; return 0; } ;;
    esac
  fi
  for sock in /var/run/docker.sock "$SOCKET"; do
    answers "$sock" && { echo "$sock"; return 0; }
  done
  return 1
}

write_conf() {
  mkdir -p "$STATE_DIR"
  cat >"$CONF" <<'EOF'
# Written by servebench's docker/engine.sh (see the comment at its top for why).
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
}

install_podman() {
  command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null \
    && command -v curl >/dev/null && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "no Docker engine answers and podman is not installed; install Docker, or podman," \
      "runc and debootstrap (Debian: apt-get install podman runc debootstrap) as root"
    exit 1
  fi
  say "installing podman, runc and debootstrap (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq podman runc debootstrap curl >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq podman runc debootstrap curl >/dev/null; }
}

start_service() {
  write_conf
  rm -f "$SOCKET"
  # setsid + nohup: the service outlives the shell that started it (CI steps, a terminal).
  # From /: its conmon children inherit its working directory, and when that was a clone
  # removed later every container start failed with "write child: broken pipe".
  (cd / && CONTAINERS_CONF="$CONF" exec setsid nohup podman system service --time=0 \
    "unix://$SOCKET" >"$LOG_FILE" 2>&1 </dev/null) &
  echo $! >"$PID_FILE"
  for _ in $(seq 1 100); do
    answers "$SOCKET" && return 0
    kill -0 "$(cat "$PID_FILE")" 2>/dev/null || break
    sleep 0.1
  done
  say "podman's API service did not answer on $SOCKET; its log ($LOG_FILE):"
  tail -n 20 "$LOG_FILE" >&2 || true
  exit 1
}

cmd_up() {
  local sock
  if sock=$(answering_socket); then
    case "$sock" in /*) echo "export DOCKER_HOST=unix://$sock" ;; *) echo "export DOCKER_HOST=$sock" ;; esac
    return 0
  fi
  install_podman
  start_service
  say "podman serves the Docker Engine API on $SOCKET"
  echo "export DOCKER_HOST=unix://$SOCKET"
}

cmd_status() {
  local sock
  if sock=$(answering_socket); then
    local version
    version=$(curl -sf --max-time 3 --unix-socket "$sock" http://d/version 2>/dev/null \
      | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Components",[{}])[0].get("Name","engine"), d.get("Version",""), "API", d.get("ApiVersion",""))' 2>/dev/null \
      || echo "an engine")
    echo "$version answers on unix://$sock"
    return 0
  fi
  echo "no container engine answers (DOCKER_HOST=${DOCKER_HOST:-unset}, /var/run/docker.sock, $SOCKET); run docker/engine.sh up"
  return 1
}

cmd_down() {
  if [ -f "$PID_FILE" ] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
    kill "$(cat "$PID_FILE")"
    rm -f "$PID_FILE" "$SOCKET"
    say "stopped podman's API service"
  else
    say "no podman API service of ours is running"
  fi
}

case "${1:-}" in
  up) cmd_up ;;
  status) cmd_status ;;
  down) cmd_down ;;
  env) write_conf; echo "export CONTAINERS_CONF=$CONF" ;;
  *) echo "usage: $0 up|status|down|env" >&2; exit 2 ;;
esac
