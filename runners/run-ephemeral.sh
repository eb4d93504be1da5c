#!/usr/bin/env bash
# The service user's loop (a launchd daemon running as SVC): before every registration it stops
# every process of the job user, resets the runner folder and the pull-request arm cache,
# refreshes main's arms from the default branch, runs the health check; then it registers an
# ephemeral runner (one job) and runs it as the job user. The registration token reaches
# config.sh through the environment of a process of SVC, never a file or an argument.
set -euo pipefail
tools="$(cd "$(dirname "$0")" && pwd -P)"
set -a
# shellcheck disable=SC1091
. "$tools/service.env"
set +a
home="$MLAGATE_HOME"
health="$home/health-venv/bin/mlagate"
base="self-hosted,macOS,ARM64,mlagate"

reset() {
  sudo -n -u "$MLAGATE_JOB_USER" /bin/kill -9 -1 2> /dev/null || true  # what a job left running
  for scratch in runner/_work runner/_diag arms-pr; do  # the job user's folders, emptied as that user
    sudo -n -u "$MLAGATE_JOB_USER" /usr/bin/find "$home/$scratch" -mindepth 1 -delete || true
  done
  find "$home/runner" -mindepth 1 -maxdepth 1 ! -name _work ! -name _diag -exec rm -rf {} +
  cp -R "$home/runner-pristine/." "$home/runner/"
  {
    echo "MLAGATE_CACHE=$home/arms-pr"
    echo "MLAGATE_ARMS_READONLY=$home/arms-main"
    echo "MLAGATE_HEALTH=$health"
    echo "ACTIONS_RUNNER_HOOK_JOB_STARTED=$tools/pre-job.sh"
  } > "$home/runner/.env"
}

while true; do
  reset
  if git -C "$home/svc/main" pull -q --ff-only; then
    "$health" arms --matrix "$home/svc/main/matrix.yaml" --cache "$home/arms-main" > /dev/null \
      || echo "run-ephemeral: main's arms could not be refreshed; jobs install theirs"
  fi
  labels="$base"
  if [ "${MLAGATE_OFFER_PERF:-1}" = 1 ] && "$health" health --performance --backend metal; then
    labels="$base,mlagate-perf"
  fi
  (
    cd "$home/runner"
    ACTIONS_RUNNER_INPUT_TOKEN="$(gh api -X POST "repos/$MLAGATE_REPO/actions/runners/registration-token" --jq .token)"
    export ACTIONS_RUNNER_INPUT_TOKEN
    ./config.sh --unattended --ephemeral --replace --url "https://github.com/$MLAGATE_REPO" \
      --name "$MLAGATE_RUNNER_NAME-$(date +%s)" --labels "$labels" --work _work
  )
  # the registration's own credentials: readable by the job user for this one job
  chmod 0644 "$home/runner/.runner" "$home/runner/.credentials" "$home/runner/.credentials_rsaparams" 2> /dev/null || true
  echo "run-ephemeral: registered with labels $labels"
  sudo -n -u "$MLAGATE_JOB_USER" "$home/runner/run.sh" || echo "run-ephemeral: run.sh ended with status $?"
  sleep 5
done
