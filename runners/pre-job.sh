#!/usr/bin/env bash
# Pre-job hook (ACTIONS_RUNNER_HOOK_JOB_STARTED): refuse the job on an unfit machine, with
# one line per failed check. Performance jobs (the mlagate-perf label was asked for: the
# job runs the `performance` kind) get the strict checks; the runner then also drops its
# perf label when it may (remove-perf-label.sh).
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd -P)"
health="${MLAGATE_HEALTH:-mlagate}"
if [ "${GITHUB_JOB:-}" = performance ]; then
  if ! "$health" health --performance --backend metal; then
    "$dir/remove-perf-label.sh" || true
    exit 1
  fi
else
  "$health" health --backend metal
fi
