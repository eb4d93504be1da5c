"""Documents typed at depth (issue 37): merged documents are typed in every part a page renders,
folders that cannot be read and manifests that are not regular files are refused in one line
(exit 2), never a traceback."""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from . import input_corpora, input_fuzz

# each example issue 37 reproduced at 3e1e071, by (corpus, case name)
EXAMPLES = [
    *(("documents", f"merge: manifest {name}") for name in ("a FIFO", "a link to /dev/zero")),
    ("documents", "merge: manifest a folder"),
    ("documents", "resume: manifest a folder"),
    ("history", "--rerender: a folder whose merged.json mutation lacks mutants"),
    ("history", "--rerender: a folder whose merged.json gaps.missing an int"),
    ("history", "--rerender: a folder whose merged.json head_run an int"),
]


def _judge_all(cases, root: Path) -> list[input_fuzz.Verdict]:
    with ThreadPoolExecutor(2) as pool:
        return list(
            pool.map(lambda ic: input_fuzz.judge(ic[1], root / str(ic[0])), enumerate(cases))
        )


def test_every_example_of_the_issue_is_a_one_line_refusal_or_a_skip(tmp_path):
    pools = {
        "documents": {c.name: c for c in input_fuzz.document_cases(10_000)},
        "history": {c.name: c for c in input_corpora.history_cases(10_000)},
    }
    missing = [name for kind, name in EXAMPLES if name not in pools[kind]]
    assert not missing, f"examples not in their corpus: {missing}"
    verdicts = _judge_all([pools[kind][name] for kind, name in EXAMPLES], tmp_path)
    problems = [f"{v.case.name}: {v.problems[0]}" for v in verdicts if v.problems]
    assert not problems, "\n".join(problems)
    by_name = {v.case.name: v for v in verdicts}
    listed = by_name["merge: manifest a FIFO"].stderr
    assert "manifest.json: not a regular file" in listed, listed


# --- folders the user cannot read: run as an unprivileged user when the tests run as root ---


def _as_user() -> list[str]:
    """The command prefix that runs a command as an unprivileged user (root reads anything)."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: no user to whom a folder is unreadable")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.parametrize("where", ["run", "run/results"])
@pytest.mark.parametrize("verb", ["merge", "report", "compare", "costs"])
def test_a_folder_that_cannot_be_read_is_one_line(verb, where):
    import subprocess
    import sys

    root = Path(tempfile.mkdtemp(prefix="mlagate-unreadable-"))
    try:
        os.chmod(root, 0o777)
        folder = input_fuzz.run_folder(root)
        for dirpath, _, files in os.walk(root):
            os.chmod(dirpath, 0o777)
            for f in files:
                os.chmod(os.path.join(dirpath, f), 0o644)
        os.chmod(root / where, 0)
        argv = {
            "merge": ["merge", str(folder), "--out", str(root / "out")],
            "report": ["report", str(folder), "--out", str(root / "out")],
            "compare": ["compare", str(folder), str(folder)],
            "costs": ["costs", str(folder)],
        }[verb]
        proc = subprocess.run(
            [*_as_user(), sys.executable, "-m", "mlagate", *argv],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "MLAGATE_CACHE": str(root / "cache")},
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0] == f"mlagate: error: {root / where}: cannot read: Permission denied"
    finally:
        os.chmod(root / where, 0o755)
        shutil.rmtree(root)
