#!/usr/bin/env bash
# The host side's native tools for `servebench overhead`: hpcc (HPL, DGEMM, STREAM,
# RandomAccess), ioping and fio, from Debian as in the servebench image (docker/images.sh
# gives the image the BLAS package the host's hpcc runs on, so install these first).
# Installs what is missing with apt-get as root; elsewhere says what to install and exits 1.
set -euo pipefail

TOOLS=(hpcc ioping fio)
missing=()
for tool in "${TOOLS[@]}"; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
[ ${#missing[@]} = 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "host-tools.sh: ${missing[*]} not installed; as root on Debian: apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "host-tools.sh: installing ${missing[*]} (apt)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
  || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
