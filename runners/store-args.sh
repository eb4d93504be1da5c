#!/usr/bin/env bash
# The --reuse arguments of a shard's mlagate run (gate.yml; docs/gate.md, Reuse), one a line.
# MLAGATE_STORE: a folder or git+URL[#BRANCH] (default: a folder in the runner's cache).
# STORE_WRITE=true (trusted runs): a folder store is written in place; a git store is read and
# the new results staged in $OUT/store (the job's artifact) for the store job. Otherwise the
# store is only read (a pull request's new results stay in its artifact, OUT/results).
set -euo pipefail
store="${MLAGATE_STORE:-${MLAGATE_CACHE:-$HOME/.cache/mlagate}/store}"
echo --reuse
echo "$store"
case "$store" in
  git+*) echo --reuse-into; echo "$OUT/store" ;;
  *) if [ "${STORE_WRITE:-}" != true ]; then echo --reuse-read-only; fi ;;
esac
