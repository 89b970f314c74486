#!/usr/bin/env bash
# make run: run the whole pipeline in one process (go run ./local).
#
# Installs ffmpeg first when it is missing and this machine can (Debian or
# Ubuntu, as root or with sudo). Running as root needs nothing here: the
# program itself runs its embedded PostgreSQL as the user "nobody" then.
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

exec go run ./local "$@"
