#!/usr/bin/env bash
# Provision a self-hosted Apple Silicon runner for the mlagate gate: ephemeral registration
# (one job per registration), labels, a launchd service, a pre-job health check.
#
# Usage (as the user the runner runs as, not root):
#   runners/provision-macos.sh --repo OWNER/REPO --runner-archive FILE_OR_URL [--dir DIR]
#                              [--name NAME] [--no-perf] [--extras EXTRAS]
#
#   --repo            the repository the runner serves (OWNER/REPO)
#   --runner-archive  the actions-runner-osx-arm64-<version>.tar.gz named on the repository's
#                     Settings > Actions > Runners > New self-hosted runner page: a path, or
#                     that page's URL (fetched with curl; nothing else is downloaded here)
#   --dir             where the runner lives (default ~/actions-runner)
#   --name            runner name prefix (default: the host name)
#   --no-perf         never offer the mlagate-perf label (a machine that runs other work)
#
# Needs: macOS on Apple Silicon, python3 3.11+, git, and the GitHub CLI `gh` logged in
# (`gh auth login`) with a token that may administer the repository's runners: each
# ephemeral registration asks for a fresh registration token (run-ephemeral.sh). No token is
# written to disk by this script.
set -euo pipefail

repo="" archive="" dir="$HOME/actions-runner" name="$(hostname -s)" perf=1 extras="cpu"
while [ $# -gt 0 ]; do
  case "$1" in
    --repo) repo="$2"; shift 2 ;;
    --runner-archive) archive="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --no-perf) perf=0; shift ;;
    --extras) extras="$2"; shift 2 ;;
    *) echo "provision-macos: unknown argument $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
[ -n "$repo" ] && [ -n "$archive" ] || { echo "provision-macos: --repo and --runner-archive are required" >&2; exit 2; }
[ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ] || { echo "provision-macos: this is not macOS on Apple Silicon" >&2; exit 2; }
[ "$(id -u)" -ne 0 ] || { echo "provision-macos: run as the runner's user, not root" >&2; exit 2; }
for tool in python3 git gh curl tar; do
  command -v "$tool" > /dev/null || { echo "provision-macos: $tool is missing" >&2; exit 2; }
done
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "provision-macos: python3 is older than 3.11" >&2; exit 2; }
gh auth status > /dev/null 2>&1 || { echo "provision-macos: gh is not logged in (gh auth login)" >&2; exit 2; }

here="$(cd "$(dirname "$0")" && pwd -P)"
mkdir -p "$dir"
if [ ! -x "$dir/config.sh" ]; then
  case "$archive" in
    https://*) curl -fsSL -o "$dir/runner.tar.gz" "$archive"; tar xzf "$dir/runner.tar.gz" -C "$dir"; rm "$dir/runner.tar.gz" ;;
    *) tar xzf "$archive" -C "$dir" ;;
  esac
fi

# mlagate for the pre-job health check, outside any job's workspace
python3 -m venv "$dir/mlagate-venv"
"$dir/mlagate-venv/bin/pip" install --disable-pip-version-check -q -e "$here/..[${extras}]"
install -m 0755 "$here/run-ephemeral.sh" "$here/pre-job.sh" "$here/remove-perf-label.sh" "$dir/"

# the runner's environment: read by run.sh for every job
{
  echo "MLAGATE_REPO=$repo"
  echo "MLAGATE_RUNNER_NAME=$name"
  echo "MLAGATE_OFFER_PERF=$perf"
  echo "MLAGATE_CACHE=$HOME/.cache/mlagate"
  echo "MLAGATE_HEALTH=$dir/mlagate-venv/bin/mlagate"
  echo "ACTIONS_RUNNER_HOOK_JOB_STARTED=$dir/pre-job.sh"
} > "$dir/.env"

plist="$HOME/Library/LaunchAgents/com.mlagate.runner.plist"
mkdir -p "$(dirname "$plist")" "$dir/logs"
sed -e "s|@RUNNER_DIR@|$dir|g" -e "s|@USER_HOME@|$HOME|g" "$here/com.mlagate.runner.plist.template" > "$plist"
launchctl bootout "gui/$(id -u)" "$plist" 2> /dev/null || true
launchctl bootstrap "gui/$(id -u)" "$plist"
echo "provision-macos: runner service started (launchctl print gui/$(id -u)/com.mlagate.runner; logs in $dir/logs)"
echo "provision-macos: health now:"
"$dir/mlagate-venv/bin/mlagate" health --performance --backend metal || true
