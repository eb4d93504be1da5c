#!/usr/bin/env bash
# Install mlagate from the checked-out tree into ./.venv on a self-hosted runner.
# MLAGATE_PYTHON: the interpreter (default python3, 3.11 or newer).
# MLAGATE_EXTRAS: pip extras (default "cpu": MLX's Linux CPU backend; a no-op on macOS,
# where the mlx wheel brings Metal).
set -euo pipefail
python="${MLAGATE_PYTHON:-python3}"
extras="${MLAGATE_EXTRAS:-cpu}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup-venv: $python is older than 3.11 (set MLAGATE_PYTHON)" >&2
  exit 2
fi
"$python" -m venv .venv
.venv/bin/pip install --disable-pip-version-check -q -e ".[${extras}]"
.venv/bin/mlagate --help > /dev/null
echo "setup-venv: mlagate installed with $("$python" --version) and extras [$extras]"
