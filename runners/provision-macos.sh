#!/usr/bin/env bash
# Provision a self-hosted Apple Silicon runner for the mlagate gate with two users:
#   SVC (the service user) registers ephemeral runners, holds the gh token that may mint
#       registration tokens, keeps main's verified arms and the health check's mlagate;
#   JOB (the job user) runs the runner program and every job. It can read none of SVC's files
#       but the runner program, and writes only runner/_work, runner/_diag and arms-pr.
# runners/README.md has the threat model.
#
# Usage (as an administrator, with sudo; both users exist, neither is an administrator):
#   sudo runners/provision-macos.sh --repo OWNER/REPO --runner-archive FILE_OR_URL
#        --svc-user SVC --job-user JOB [--home DIR] [--name NAME] [--no-perf] [--extras EXTRAS]
#
#   --home   the runner home (default /opt/mlagate-runner), laid out by runners/layout.txt
#   Before:  `sudo -u SVC -H gh auth login` with a fine-grained token on this repository with
#            "Administration: read and write" (the token stays in SVC's home, mode 0700).
set -euo pipefail

repo="" archive="" home="/opt/mlagate-runner" name="$(hostname -s)" perf=1 extras="cpu" svc="" job=""
while [ $# -gt 0 ]; do
  case "$1" in
    --repo) repo="$2"; shift 2 ;;
    --runner-archive) archive="$2"; shift 2 ;;
    --home) home="$2"; shift 2 ;;
    --svc-user) svc="$2"; shift 2 ;;
    --job-user) job="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --no-perf) perf=0; shift ;;
    --extras) extras="$2"; shift 2 ;;
    *) echo "provision-macos: unknown argument $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
[ -n "$repo" ] && [ -n "$archive" ] && [ -n "$svc" ] && [ -n "$job" ] || {
  echo "provision-macos: --repo, --runner-archive, --svc-user and --job-user are required" >&2; exit 2; }
[ "$svc" != "$job" ] || { echo "provision-macos: the service and job users must differ" >&2; exit 2; }
[ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ] || { echo "provision-macos: this is not macOS on Apple Silicon" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "provision-macos: run with sudo (it creates folders owned by two users)" >&2; exit 2; }
for user in "$svc" "$job"; do
  id "$user" > /dev/null 2>&1 || { echo "provision-macos: no user $user" >&2; exit 2; }
  if dseditgroup -o checkmember -m "$user" admin > /dev/null 2>&1; then
    echo "provision-macos: $user is an administrator; use a standard user" >&2; exit 2
  fi
done
for tool in python3 git gh curl tar; do
  command -v "$tool" > /dev/null || { echo "provision-macos: $tool is missing" >&2; exit 2; }
done
sudo -u "$svc" -H gh auth status > /dev/null 2>&1 || { echo "provision-macos: gh is not logged in as $svc (sudo -u $svc -H gh auth login)" >&2; exit 2; }

here="$(cd "$(dirname "$0")" && pwd -P)"
"$here/apply-layout.sh" "$home" "$svc" "$job"

# the runner program, kept pristine: run-ephemeral.sh copies it to runner/ before each registration
if [ ! -x "$home/runner-pristine/config.sh" ]; then
  case "$archive" in
    https://*) curl -fsSL -o "$home/runner.tar.gz" "$archive"; tar xzf "$home/runner.tar.gz" -C "$home/runner-pristine"; rm "$home/runner.tar.gz" ;;
    *) tar xzf "$archive" -C "$home/runner-pristine" ;;
  esac
  chown -R "$svc" "$home/runner-pristine"
  chmod -R go-w "$home/runner-pristine"
fi

# mlagate for the health check and main's arms: a regular install (not editable), owned by svc
python3 -m venv "$home/health-venv"
"$home/health-venv/bin/pip" install --disable-pip-version-check -q "$here/..[${extras}]"
chown -R "$svc" "$home/health-venv"
chmod -R go-w "$home/health-venv"
install -o "$svc" -m 0755 "$here/run-ephemeral.sh" "$here/pre-job.sh" "$here/remove-perf-label.sh" \
  "$here/apply-layout.sh" "$here/layout.txt" "$home/tools/"
[ -d "$home/svc/main/.git" ] || sudo -u "$svc" -H git clone -q "https://github.com/$repo" "$home/svc/main"

# what run-ephemeral.sh reads (svc's) and what the runner's .env becomes (read-only to jobs)
{
  echo "MLAGATE_REPO=$repo"
  echo "MLAGATE_RUNNER_NAME=$name"
  echo "MLAGATE_OFFER_PERF=$perf"
  echo "MLAGATE_JOB_USER=$job"
  echo "MLAGATE_SVC_USER=$svc"
  echo "MLAGATE_HOME=$home"
} > "$home/tools/service.env"
chown "$svc" "$home/tools/service.env"
chmod 0644 "$home/tools/service.env"

# what svc may run as the job user: the runner, killing all of its processes, emptying its folders
sudoers="/etc/sudoers.d/mlagate-runner"
empty() { printf ', /usr/bin/find %s -mindepth 1 -delete' "$home/$1"; }
printf '%s ALL=(%s) NOPASSWD: %s, /bin/kill -9 -1%s%s%s\n' "$svc" "$job" "$home/runner/run.sh" \
  "$(empty runner/_work)" "$(empty runner/_diag)" "$(empty arms-pr)" > "$sudoers.tmp"
visudo -cf "$sudoers.tmp" > /dev/null && install -m 0440 "$sudoers.tmp" "$sudoers"
rm -f "$sudoers.tmp"

plist="/Library/LaunchDaemons/com.mlagate.runner.plist"
svc_home="$(dscl . -read "/Users/$svc" NFSHomeDirectory | awk '{print $2}')"
sed -e "s|@HOME@|$home|g" -e "s|@SVC@|$svc|g" -e "s|@SVC_HOME@|$svc_home|g" "$here/com.mlagate.runner.plist.template" > "$plist"
chown root:wheel "$plist"
chmod 0644 "$plist"
launchctl bootout system "$plist" 2> /dev/null || true
launchctl bootstrap system "$plist"
echo "provision-macos: runner service started (launchctl print system/com.mlagate.runner; logs in $home/svc/runner.log)"
echo "provision-macos: health as the job user now:"
sudo -u "$job" -H "$home/health-venv/bin/mlagate" health --performance --backend metal || true
