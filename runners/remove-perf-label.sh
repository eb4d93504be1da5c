#!/usr/bin/env bash
# Take this runner out of the performance label through the GitHub API, so queued
# performance jobs go to another machine. Guarded: does nothing unless
# MLAGATE_REMOVE_LABEL=1, the GitHub CLI is logged in, and MLAGATE_REPO and RUNNER_NAME
# name the runner. An ephemeral runner gets its labels back at its next registration
# (run-ephemeral.sh), after a passing health check.
set -euo pipefail
label="${MLAGATE_PERF_LABEL:-mlagate-perf}"
if [ "${MLAGATE_REMOVE_LABEL:-0}" != 1 ]; then
  echo "remove-perf-label: MLAGATE_REMOVE_LABEL is not 1; leaving label $label"
  exit 0
fi
: "${MLAGATE_REPO:?remove-perf-label: MLAGATE_REPO (OWNER/REPO) is not set}"
: "${RUNNER_NAME:?remove-perf-label: RUNNER_NAME is not set}"
command -v gh > /dev/null || { echo "remove-perf-label: gh is missing" >&2; exit 2; }
id="$(gh api "repos/$MLAGATE_REPO/actions/runners" --paginate --jq ".runners[] | select(.name == \"$RUNNER_NAME\") | .id")"
[ -n "$id" ] || { echo "remove-perf-label: no runner named $RUNNER_NAME in $MLAGATE_REPO" >&2; exit 1; }
gh api -X DELETE "repos/$MLAGATE_REPO/actions/runners/$id/labels/$label" > /dev/null
echo "remove-perf-label: removed $label from runner $RUNNER_NAME ($id)"
