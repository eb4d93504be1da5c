#!/usr/bin/env bash
# The launchd program of an mlagate runner: register ephemerally, run one job, repeat.
# Each registration re-runs the health check; a machine unfit for timing is registered
# without the performance label, so performance jobs go elsewhere until it recovers.
# Reads the runner directory's .env (written by provision-macos.sh).
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd -P)"
cd "$dir"
set -a
# shellcheck disable=SC1091
. ./.env
set +a

base="self-hosted,macOS,ARM64,mlagate"
while true; do
  labels="$base"
  if [ "${MLAGATE_OFFER_PERF:-1}" = 1 ] && "$MLAGATE_HEALTH" health --performance --backend metal; then
    labels="$base,mlagate-perf"
  fi
  token="$(gh api -X POST "repos/$MLAGATE_REPO/actions/runners/registration-token" --jq .token)"
  ./config.sh --unattended --ephemeral --replace --url "https://github.com/$MLAGATE_REPO" --token "$token" \
    --name "$MLAGATE_RUNNER_NAME-$(date +%s)" --labels "$labels" --work _work
  unset token
  echo "run-ephemeral: registered with labels $labels"
  ./run.sh || echo "run-ephemeral: run.sh ended with status $?"
  sleep 5
done
