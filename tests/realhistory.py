"""A runtime repository with a history: mlx-lm 0.32.2's installed files with the shipped patch
(the patched arm) as its first commit, then unrelated edits (a note file, a comment in
sample_utils.py, every fifth one a comment inside deepseek_v3.py, so the module's files change
and its cases are measured again), with a planted edit of deepseek_v3.py at one commit."""

from __future__ import annotations

from pathlib import Path

from tests.fakert import git
from tests.realrt import DECISION, GUARD, PATCH, stock_files

MODULE = Path("mlx_lm") / "models" / "deepseek_v3.py"


def put_back_guard(repo: Path) -> None:
    """`L == 1` put back in place of deepseek_v3's cache-aware decision."""
    f = repo / MODULE
    assert DECISION in f.read_text()
    f.write_text(f.read_text().replace(DECISION, GUARD))


def unrelated(repo: Path, i: int) -> str:
    if i % 5 == 0:
        f = repo / MODULE
        f.write_text(f.read_text() + f"\n# note {i}: an unrelated comment\n")
        return f"deepseek_v3: comment {i}"
    if i % 2:
        f = repo / "NOTES.md"
        f.write_text((f.read_text() if f.exists() else "") + f"note {i}\n")
        return f"notes: {i}"
    f = repo / "mlx_lm" / "sample_utils.py"
    f.write_text(f.read_text() + f"\n# unrelated {i}\n")
    return f"sample_utils: comment {i}"


def history(repo: Path, cache: Path, n: int, planted: dict[int, callable]) -> list[str]:
    """The repository at repo with n commits after the first; planted: commit number (1..n)
    -> an edit made in that commit instead of an unrelated one. Returns every commit, oldest
    first (the patched release first)."""
    repo.mkdir(parents=True)
    stock_files(cache, repo)
    git(repo, "init", "--quiet", "--initial-branch", "main")
    git(repo, "apply", str(PATCH))
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "mlx-lm 0.32.2 with the threshold patch")
    for i in range(1, n + 1):
        if i in planted:
            message = planted[i](repo)
        else:
            message = unrelated(repo, i)
        git(repo, "add", "--all")
        git(repo, "commit", "--quiet", "-m", message)
    return git(repo, "log", "--reverse", "--format=%H").split()


def guard(repo: Path) -> str:
    put_back_guard(repo)
    return "deepseek_v3: L == 1 put back"


# deepseek_v3's L = 1 step (the l1_parity geometry deepseek-v3, the quick profile's cache
# lengths), median of the good end's pairs on the 2-core CPU, quiet (docs/bisect.md): the
# planted wait is 8 % of it
STEP_S = {256: 0.00081, 1024: 0.0012, 4096: 0.0080}
SLOW = (
    "        if L == 1 and cache is not None:  # planted: an L = 1 step about 8 % slower\n"
    "            import time\n"
    "\n"
    "            step = min(STEPS, key=lambda t: abs(t - cache.offset))\n"
    "            until = time.perf_counter() + 0.08 * STEPS[step]\n"
    "            while time.perf_counter() < until:\n"
    "                pass\n"
)


def slowdown(repo: Path) -> str:
    """A busy-wait of 8 % of the step in every L = 1 call of deepseek_v3's attention."""
    f = repo / MODULE
    text = f.read_text()
    assert DECISION in text
    text = text.replace(DECISION, DECISION + "\n" + SLOW)
    f.write_text(f"STEPS = {STEP_S!r}\n" + text)
    return "deepseek_v3: an L = 1 step about 8 % slower"
