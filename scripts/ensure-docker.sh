#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine, installing and starting one if needed.
#
# Idempotent and non-interactive (safe to run as root in CI on a fresh Debian/Ubuntu machine):
#   1. install Debian's docker.io (dockerd, containerd, runc) when no dockerd is present;
#   2. install debootstrap when missing (the container tests build their base image with it);
#   3. when `docker info` fails, start `dockerd --iptables=false --bridge=none` in the
#      background, logging to .cache/dockerd.log, and wait until it answers.
#
# Environment:
#   DOCKER_WAIT_SECONDS  how long to wait for the engine to answer (default 90)
#   DOCKERD_LOG          where dockerd logs (default <repo>/.cache/dockerd.log)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wait_seconds="${DOCKER_WAIT_SECONDS:-90}"
log="${DOCKERD_LOG:-$repo/.cache/dockerd.log}"

say() { printf 'ensure-docker: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        die "need root to run: $*"
    fi
}

apt_updated=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install $* by hand"
    if [ "$apt_updated" -eq 0 ]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
        apt_updated=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" \
        </dev/null
}

engine_answers() { docker info >/dev/null 2>&1; }

# 1. Engine binaries.
packages=()
command -v dockerd >/dev/null 2>&1 || packages+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || packages+=(debootstrap)
if [ "${#packages[@]}" -gt 0 ]; then
    say "installing ${packages[*]}"
    apt_install "${packages[@]}"
fi
command -v docker >/dev/null 2>&1 || die "no docker client on PATH after installing docker.io"

# 2. A running engine.
if engine_answers; then
    say "engine is up ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))"
    exit 0
fi

pidfile=/var/run/docker.pid
if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    say "removing stale $pidfile"
    as_root rm -f "$pidfile"
fi

if pgrep -x dockerd >/dev/null 2>&1; then
    say "dockerd is running but does not answer yet; waiting"
else
    mkdir -p "$(dirname "$log")"
    say "starting dockerd (log: $log)"
    as_root setsid nohup dockerd --iptables=false --bridge=none >>"$log" 2>&1 </dev/null &
fi

for _ in $(seq 1 "$wait_seconds"); do
    if engine_answers; then
        say "engine is up ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))"
        exit 0
    fi
    sleep 1
done

say "last lines of $log:"
tail -n 20 "$log" >&2 2>/dev/null || true
die "the Docker engine did not answer within ${wait_seconds}s (log: $log)"
