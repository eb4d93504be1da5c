"""Time rendering the history of 100 commits of the default matrix.

The commits are synthetic but built from the real default-matrix results (the CPU reference
set plus the H200 runs in docs/reference/): every commit is a copy whose key figures are
scaled by seeded noise (3 % relative, Gaussian), and from commit 60 on the patched mlx-lm
arm's DeepSeek-V3 marginal cost is tripled (a planted step). Prints the time to rebuild the
index from merged.json (figures not cached), the index again (figures cached), one commit
page, and all 100 commit pages, and which steps the detector flagged.

    PYTHONPATH=src python benchmarks/report_history.py [--commits 100] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mlagate.report import history
from mlagate.report import merged as merged_doc
from mlagate.report import page as report

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    *sorted((ROOT / "docs/reference/cpu").glob("*.tgz")),
    *sorted((ROOT / "docs/reference/h200").glob("*.tgz")),
]
STEP_AT, STEP_ARM, STEP_MODULE = 60, "mlx-lm-0.32.2-patched", "mlx-lm/deepseek_v3"


def perturb(rows: list[dict], rng: random.Random, step: bool) -> list[dict]:
    rows = json.loads(json.dumps(rows))
    for r in rows:
        m = r.get("metrics") or {}
        f = lambda: 1 + rng.gauss(0, 0.03)  # noqa: E731
        if r["suite"] == "marginal_cost" and isinstance(m.get("marginal"), dict):
            boost = 3.0 if step and r["arm"] == STEP_ARM and r["module"] == STEP_MODULE else 1.0
            for per in m["marginal"].values():
                for v in per["per_T"].values():
                    v["marginal_s"] *= f() * boost
        if (
            r["suite"] == "crossover"
            and isinstance(m.get("crossover"), dict)
            and "absorbed_slowdown_at_formula" in m["crossover"]
        ):
            m["crossover"]["absorbed_slowdown_at_formula"] *= f()
        if r["suite"] == "equivalence" and isinstance(m.get("errors_ulps"), dict):
            for row in m["errors_ulps"].values():
                row["delta"]["p99"] *= f()
        if r["suite"] == "l1_parity" and isinstance(m.get("l1"), dict):
            for v in m["l1"].values():
                v["change"] *= f()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=100)
    ap.add_argument("--keep", type=Path, default=None, help="write the history here and keep it")
    args = ap.parse_args()
    base = [r for p in SOURCES for r in merged_doc.load_source(p)]
    rng = random.Random(0)
    root = args.keep or Path(tempfile.mkdtemp(prefix="mlagate-history-"))
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    for i in range(args.commits):
        sha = f"{i:04d}" + f"{rng.getrandbits(144):036x}"
        merged = merged_doc.merge(
            [("synthetic", perturb(base, rng, i >= STEP_AT))],
            sha,
            (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=i)).isoformat(),
        )
        folder = root / sha
        folder.mkdir()
        (folder / "merged.json").write_text(json.dumps(merged), encoding="utf-8")
    made = time.perf_counter() - t0
    print(
        f"{args.commits} commits of {len(merged['results'])} results each written in {made:.1f} s "
        f"({sum(f.stat().st_size for f in root.glob('*/merged.json')) / 1e6:.0f} MB of merged.json)"
    )

    t = time.perf_counter()
    history.render_index(root)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    history.render_index(root)
    warm = time.perf_counter() - t
    folders = sorted(p for p in root.iterdir() if p.is_dir())
    t = time.perf_counter()
    report.write_commit(
        merged_doc.load_merged(folders[-1] / "merged.json"), folders[-1], "../index.html"
    )
    one = time.perf_counter() - t
    t = time.perf_counter()
    for f in folders:
        report.write_commit(merged_doc.load_merged(f / "merged.json"), f, "../index.html")
    every = time.perf_counter() - t
    print(f"index from merged.json (figures computed): {cold:.2f} s")
    print(f"index with cached figures.json:           {warm:.2f} s")
    print(f"one commit page (plots, junit, summary):   {one:.2f} s")
    print(f"all {len(folders)} commit pages re-rendered:       {every:.1f} s")

    series = history.trends(history.load_commits(root))
    flagged = [(s["key"], st["index"], st["change"]) for s in series for st in s["steps"]]
    planted = [f for f in flagged if f[0].startswith(f"{STEP_MODULE}|marginal_ms|{STEP_ARM}|")]
    print(
        f"steps flagged: {len(flagged)} in {len(series)} series; planted step series flagged: "
        + ", ".join(
            f"{k.split('|')[3]}/{k.split('|')[4]} at commit {i} ({c:+.0%})" for k, i, c in planted
        )
    )
    others = [f for f in flagged if f not in planted]
    print(
        f"other flags (false alarms under 3 % noise): {len(others)}"
        + (": " + "; ".join(f"{k} at {i}" for k, i, _ in others[:5]) if others else "")
    )
    print(f"history: {root / 'index.html'}")
    if args.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
