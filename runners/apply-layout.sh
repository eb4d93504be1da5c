#!/usr/bin/env bash
# Create the folders of runners/layout.txt under HOME_DIR with their owner and mode.
# Usage: apply-layout.sh HOME_DIR SVC_USER JOB_USER [--dry-run]
# --dry-run prints the commands instead of running them (how tests/test_runners.py reads it).
set -euo pipefail
[ $# -ge 3 ] || { echo "apply-layout: usage: apply-layout.sh HOME_DIR SVC_USER JOB_USER [--dry-run]" >&2; exit 2; }
home="$1" svc="$2" job="$3" dry="${4:-}"
layout="$(cd "$(dirname "$0")" && pwd -P)/layout.txt"
run() { if [ "$dry" = --dry-run ]; then echo "$*"; else "$@"; fi; }
while read -r path owner mode; do
  case "$path" in ''|'#'*) continue ;; esac
  case "$owner" in svc) user="$svc" ;; job) user="$job" ;; *) echo "apply-layout: bad owner $owner" >&2; exit 2 ;; esac
  run install -d -o "$user" -m "$mode" "$home/$path"
  run chown "$user" "$home/$path"
  run chmod "$mode" "$home/$path"
done < "$layout"
