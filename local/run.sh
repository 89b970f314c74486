#!/usr/bin/env bash
# make run: run the whole pipeline in one process (go run ./local).
#
# Installs ffmpeg first when it is missing and this machine can (Debian or
# Ubuntu, as root or with sudo). PostgreSQL refuses to run as root, so as
# root without DATABASE_URL the program is built and run as the unprivileged
# user "nobody", with its embedded PostgreSQL under /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v ffmpeg >/dev/null || ! command -v ffprobe >/dev/null; then
  if command -v apt-get >/dev/null; then
    echo "make run: ffmpeg is missing; installing it with apt-get" >&2
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq && $sudo apt-get install -y -qq ffmpeg >/dev/null
  else
    echo "make run: ffmpeg is missing and this is not a Debian-like system; install ffmpeg (it must be on PATH) and run again" >&2
    exit 1
  fi
fi

if [ "$(id -u)" -eq 0 ] && [ -z "${DATABASE_URL:-}" ]; then
  bin=/tmp/aivedio-local
  go build -o "$bin" ./local
  export LOCAL_DATA_DIR="${LOCAL_DATA_DIR:-/tmp/aivedio-local-data}"
  mkdir -p "$LOCAL_DATA_DIR" && chown nobody "$LOCAL_DATA_DIR"
  echo "make run: running as root; starting the pipeline as user nobody so the embedded PostgreSQL can run (data in $LOCAL_DATA_DIR)" >&2
  exec runuser -u nobody -- env HOME=/tmp PATH="$PATH" "$bin" "$@"
fi
exec go run ./local "$@"
