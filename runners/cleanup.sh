#!/usr/bin/env bash
# Post-job cleanup on a self-hosted runner. Run from the job's workspace (the checkout).
#
# 1. Stops mlagate workers left behind by a cancelled job (only those whose working
#    directory is this workspace). MLX's buffer cache lives in the worker process, so
#    this is what gives its memory back.
# 2. Removes run outputs (they travelled as artifacts) and the job's .venv.
# 3. Removes stale arms: install directories of the arm cache that the current matrix no
#    longer uses and that are older than MLAGATE_ARM_MAX_AGE_DAYS (default 14), and the
#    planner's kept arm scans (CACHE/scans) as old (made again when needed). The cache
#    (MLAGATE_CACHE, default ~/.cache/mlagate) is shared by jobs, so arms in use stay.
# 4. Prunes the result store (MLAGATE_STORE, default CACHE/store; docs/gate.md, Reuse): entries
#    no run has written or reused for MLAGATE_STORE_MAX_AGE_DAYS (default 30; a reuse touches
#    its entry) go.
set -uo pipefail
workspace="$(pwd -P)"
cache="${MLAGATE_CACHE:-$HOME/.cache/mlagate}"
max_age="${MLAGATE_ARM_MAX_AGE_DAYS:-14}"
store="${MLAGATE_STORE:-$cache/store}"
store_age="${MLAGATE_STORE_MAX_AGE_DAYS:-30}"

cwd_of() {
  if [ -e "/proc/$1/cwd" ]; then
    readlink "/proc/$1/cwd" 2>/dev/null
  else
    lsof -a -p "$1" -d cwd -Fn 2>/dev/null | sed -n 's/^n//p'
  fi
}

for pid in $(pgrep -f "mlagate[.]worker" || true); do
  cwd="$(cwd_of "$pid" || true)"
  if [ -n "$cwd" ] && [ "${cwd#"$workspace"}" != "$cwd" ]; then
    echo "cleanup: stopping stray worker $pid"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  fi
done

keep=""
if [ -x .venv/bin/mlagate ]; then
  keep="$(.venv/bin/mlagate arms --keys 2>/dev/null)"
fi
rm -rf "$workspace/out" "$workspace/reports/latest" "$workspace/.venv"

if [ -n "$keep" ] && [ -d "$cache/arms" ]; then
  find "$cache/arms" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -mtime +"$max_age" -print | while read -r dir; do
    if ! printf '%s\n' "$keep" | grep -qx "$(basename "$dir")"; then
      rm -rf "$dir" "$dir.lock" && echo "cleanup: removed stale arm $(basename "$dir")"
    fi
  done
fi
if [ -n "$keep" ] && [ -d "$cache/scans" ]; then
  find "$cache/scans" -mindepth 1 -maxdepth 1 -type f -name '*.json' -mtime +"$max_age" -delete
fi
if [ -d "$store/results" ]; then
  pruned="$(find "$store/results" -mindepth 1 -maxdepth 2 -type f -name '*.json' -mtime +"$store_age" -print -delete | wc -l)"
  [ "$pruned" -gt 0 ] && echo "cleanup: pruned $pruned result store entries older than $store_age days"
fi
echo "cleanup: done"
exit 0
