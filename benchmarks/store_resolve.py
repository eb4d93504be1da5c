"""The git result store (mlagate.store.gitstore) at fleet sizes: the time a run takes to
resolve its plan's keys against stores of 1K, 10K and 100K entries (open: the blobless tip
fetch and the listing; prefetch: the plan's entries in one fetch; get: each checked), and the
bytes one main commit of a plan's entries adds to the remote (its pack on the origin).

Entries are real result documents (--results DIR..., e.g. an OUT/results of `mlagate run`),
cycled under made-up keys; each store is a local bare origin (file://, uploadpack.allowFilter
on, as GitHub serves), built once by git fast-import.

    python benchmarks/store_resolve.py --results reports/latest/results [--plan 656]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlagate.gate.reuse.keys import Key, combine, digest
from mlagate.store import entries, open_store


def key_of(n: int) -> Key:
    parts = {p: digest([p, n]) for p in ("runtime", "suite", "harness", "matrix", "mlx")}
    return Key(combine(parts), parts)


def docs(folders: list[Path]) -> list[dict]:
    found = []
    for folder in folders:
        for path in sorted(folder.glob("*.json")):
            doc = json.loads(path.read_text())
            if entries.decisive(doc) is None:
                found.append(doc)
    if not found:
        sys.exit("no decisive results under --results")
    return found


def build(bare: Path, n: int, templates: list[dict]) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "config", "uploadpack.allowFilter", "true"], check=True)
    cmds = [b"commit refs/heads/mlagate-results", b"committer b <b@b> 0 +0000", b"data 1", b"x"]
    marker = entries.encode(entries.MARKER_DOC)
    cmds += [f"M 100644 inline {entries.MARKER}".encode(), f"data {len(marker)}".encode(), marker]
    for i in range(n):
        key = key_of(i)
        raw = entries.encode(entries.make(key, templates[i % len(templates)], "c0"))
        path = entries.entry_path(key.digest)
        cmds += [f"M 100644 inline {path}".encode(), f"data {len(raw)}".encode(), raw]
    proc = subprocess.run(
        ["git", "--git-dir", str(bare), "fast-import", "--quiet"], input=b"\n".join(cmds) + b"\n"
    )
    proc.check_returncode()
    subprocess.run(["git", "--git-dir", str(bare), "gc", "-q"], check=True)


def pack_bytes(bare: Path) -> int:
    return sum(p.stat().st_size for p in (bare / "objects").rglob("*") if p.is_file())


def resolve(spec: str, plan: int, n: int) -> dict:
    """One run's reads: plan keys, half of them present (a PR that changed half its cases)."""
    wanted = [key_of(i) for i in range(0, plan // 2)] + [key_of(n + i) for i in range(plan // 2)]
    t0 = time.perf_counter()
    st = open_store(spec, write=False)
    t1 = time.perf_counter()
    st.prefetch(wanted)
    t2 = time.perf_counter()
    hits = sum(st.get(k) is not None for k in wanted)
    t3 = time.perf_counter()
    assert hits == plan // 2, hits
    return {"open": t1 - t0, "prefetch": t2 - t1, "get": t3 - t2, "total": t3 - t0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", type=Path, nargs="+", required=True)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--plan", type=int, default=656, help="cases in the plan (shipped main: 656)")
    args = ap.parse_args()
    templates = docs(args.results)
    sizes = [len(entries.encode(entries.make(key_of(0), d, "c0"))) for d in templates]
    print(f"{len(templates)} result documents, entry {min(sizes)}-{max(sizes)} bytes, "
          f"mean {sum(sizes) // len(sizes)}; load {os.getloadavg()[0]:.1f}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.sizes.split(",")):
            bare = Path(tmp) / f"s{n}.git"
            t = time.perf_counter()
            build(bare, n, templates)
            built = time.perf_counter() - t
            spec = f"git+file://{bare}"
            runs = [resolve(spec, args.plan, n) for _ in range(3)]
            best = min(runs, key=lambda r: r["total"])
            before = pack_bytes(bare)
            w = open_store(spec, write=True)
            for i in range(args.plan):
                w.put(key_of(10**7 + i), templates[i % len(templates)], "c1")
            w.publish()
            added = pack_bytes(bare) - before
            print(
                f"{n:>7} entries (built in {built:.0f} s, {before / 1e6:.1f} MB): resolve "
                f"{args.plan} keys {best['total']:.2f} s (open {best['open']:.2f}, prefetch "
                f"{best['prefetch']:.2f}, get {best['get']:.2f}; worst of 3 "
                f"{max(r['total'] for r in runs):.2f}); a commit of {args.plan} entries "
                f"adds {added / 1e3:.0f} KB"
            )


if __name__ == "__main__":
    main()
