"""Power of the L = 1 parity gate: l1_parity against planted L = 1 slowdowns of known size.

    python benchmarks/l1_power.py [--runs 5] [--sizes 0,2,5,10] [--geometry deepseek-v3]
        [--mode busy|sleep|work] [--steps JSON] [--gate KEY=VALUE]... [--name cpu]
        [--out-dir docs/reference/cpu] [--continue] [--until SECONDS] [-- RUN_ARGS...]

RUN_ARGS go to every `mlagate run` (a loaded machine: `-- --allow-unfit`; the H200:
`-- --backend cuda --profile full --runner linux-cuda-h200`). `--gate max_pairs=24` or
`--gate tolerance.cpu=0.05` sets a gate of suites.l1_parity in the benchmark's matrix only.

The planted arms are temporary: the benchmark writes a matrix of its own (the repository's, in
a temporary folder beside links to everything else) with one arm per size, `l1plant-<size>`:
the patched mlx-lm 0.32.2 arm (`pypi` + the shipped patch, baseline the stock arm) with an
activation (`activate`, docs/matrix.md) that wraps `DeepseekV3Attention.__call__` and, for a
call with one query, busy-waits the arm's wait at that cache length (the nearest one sized)
before calling the runtime's own method (`--mode sleep` sleeps that long instead, `--mode work`
evaluates that long's worth of 64x64 matmuls, timed when the worker starts). The arms differ
only in their activation's environment, so they share one install; nothing shipped is changed.
`--steps '{"256": 0.005, ...}'` gives the steps instead of sizing.

Sizing, by the measured step at each cache length: the first run of size 0 (the activation
installed, no wait) measures the stock baseline's L = 1 step per cache length (the median of its
pairs' `baseline_s`), and a size's first wait is that share of it. A wait of w seconds does not
cost w everywhere (on a 2-core CPU +5 % of a 0.77 ms step measured +13 %), so after each case of
a size the benchmark measures what its wait realised at each cache length (the case's change
against the stock arm, the gate's baseline) and sizes that size's next wait by it (`waits`): a
size is a slowdown against stock, so the wait also makes up the unplanted arm's own change (a
patched arm 4 % faster than stock waits about 9 % of the step for +5 %), and the realised change
is what the table reports, beside the nominal size. Runs interleave the sizes (0, 2, 5, 10, then
again), so a change of the machine's load reaches every size alike. Each case is one JSON line
(the size, its waits, the verdict, why, the measured change and interval per cache length, every
process pair's change, the case's time, the load average when its run started) in
OUT-DIR/l1-power-NAME.jsonl (benchmarks/l1_replay.py replays its pairs); the table per size (cases
decided pass / fail / invalid, the realised change per cache length, median and longest case
time) goes to OUT-DIR/l1-power-NAME.json and .md, with the machine and the gates used.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MODULE = "mlx-lm/deepseek_v3"
PATCHED = "mlx-lm-0.32.2-patched"

PLANT = Path(__file__).with_name("l1_plant.py")  # the activation the planted arms run


def main() -> None:
    args = _arguments()
    sizes = [float(s) for s in args.sizes.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="mlagate-l1power-"))
    _stage(folder)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines_path = out_dir / f"l1-power-{args.name}.jsonl"
    steps: dict[int, float] = {int(t): s for t, s in json.loads(args.steps or "{}").items()}
    lines = _kept(lines_path) if args.resume else []
    sized = [c["baseline_step_s"] for c in lines if c["size"] == 0 and c["baseline_step_s"]]
    steps = steps or ({int(t): s for t, s in sized[0].items()} if sized else {})
    started = time.monotonic()
    for i, size in planned(lines, sizes, args.runs):
        if size and not steps:
            continue  # sized from the first size-0 run
        taken = [c["case_s"] + 15 for c in lines if c["size"] == size]  # kept ones included
        expected = max(taken, default=args.case_s)
        if args.until and time.monotonic() - started + expected > args.until:
            print(f"stopped before run {i} size {size:g}: --until {args.until:g} s")
            break
        wait = waits(size, steps, lines)
        matrix = _matrix(folder, {size: wait}, args)
        for line in _gate_run(i, size, matrix, args):
            line["wait_s"] = {str(t): w for t, w in wait.items()}
            line["realised"] = realised(line)
            lines.append(line)
            with open(lines_path, "a") as fh:
                fh.write(json.dumps(line) + "\n")
            shown = {k: line[k] for k in ("run", "size", "verdict", "case_s", "realised")}
            print(json.dumps(shown))
            if size == 0 and not steps:
                steps = {int(t): s for t, s in line["baseline_step_s"].items()}
    table = summary(lines, sorted({c["size"] for c in lines} | set(sizes)))
    doc = {"machine": _machine(), "gates": _gates(folder, args), "steps_s": steps, "table": table}
    (out_dir / f"l1-power-{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out_dir / f"l1-power-{args.name}.md").write_text(markdown(doc))
    print(markdown(doc))


def planned(lines: list[dict], sizes: list[float], runs: int) -> list[tuple[int, float]]:
    """The (run, size) cases still to take: `runs` more runs, the sizes interleaved, after the
    kept cases; a run that --until cut short is finished first."""
    done = {(c["run"], c["size"]) for c in lines}
    first = max((c["run"] for c in lines), default=0)
    first += all((first, size) in done for size in sizes)
    todo = [(i, size) for i in range(first, first + runs) for size in sizes]
    return [t for t in todo if t not in done]


def _kept(path: Path) -> list[dict]:
    """The case lines of earlier invocations (--continue), each a JSON object."""
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _unplanted(lines: list[dict]) -> dict[int, float]:
    """The unplanted arm's own change against stock per cache length (median over its cases):
    what the activation costs without a wait."""
    by_t: dict[int, list[float]] = {}
    for c in lines:
        if c["size"] == 0:
            for t in c["l1"]:
                by_t.setdefault(int(t["T"]), []).append(t["change"])
    return {T: statistics.median(v) for T, v in by_t.items()}


def realised(line: dict) -> dict[str, float]:
    """A case's change against the stock arm per cache length: the slowdown the gate sees (the
    unplanted arm's own change included, so a size is what the gate is asked to catch)."""
    return {str(t["T"]): t["change"] for t in line["l1"]}


def waits(size: float, steps: dict[int, float], lines: list[dict]) -> dict[int, float]:
    """The wait per cache length that makes the planted arm `size` percent slower than stock.
    The wait has to add the size less the unplanted arm's own change there (a patched arm 4 %
    faster than stock waits 9 % for +5 %): the first case of a size waits that share of the
    measured stock step; later ones scale it by what the earlier cases of the size realised per
    second waited (the median over them), so the realised change is the nominal one where the
    machine makes a wait cost more or less than its length."""
    if not size or not steps:
        return {}
    own, out = _unplanted(lines), {}
    for T, step in steps.items():
        target = size / 100 - own.get(T, 0.0)
        gains = [
            (c["realised"][str(T)] - own.get(T, 0.0)) / c["wait_s"][str(T)]
            for c in lines
            if c["size"] == size
            and c.get("wait_s", {}).get(str(T))
            and str(T) in c.get("realised", {})
        ]
        gain = statistics.median(gains) if gains else 0.0
        out[T] = target / gain if gain > target / (10 * step) > 0 else max(target, 0.0) * step
    return out


def summary(lines: list[dict], sizes: list[float]) -> list[dict]:
    """Per planted size: decided pass / fail / invalid counts, median measured change (the
    worst cache length of each case), case times."""
    rows = []
    for size in sizes:
        cases = [c for c in lines if c["size"] == size]
        if not cases:
            continue
        worst = [max((t["change"] for t in c["l1"]), key=abs) for c in cases if c["l1"]]
        ts = sorted({int(t) for c in cases for t in c.get("realised", {})})
        rows.append(
            {
                "size_pct": size,
                "realised": {
                    str(T): round(
                        statistics.median(
                            c["realised"][str(T)] for c in cases if str(T) in c.get("realised", {})
                        ),
                        4,
                    )
                    for T in ts
                },
                "cases": len(cases),
                "pass": sum(c["verdict"] == "pass" for c in cases),
                "fail": sum(c["verdict"] == "fail" for c in cases),
                "invalid": sum(c["verdict"] not in ("pass", "fail") for c in cases),
                "median_change": round(statistics.median(worst), 4) if worst else None,
                "median_case_s": round(statistics.median(c["case_s"] for c in cases), 1),
                "longest_case_s": round(max(c["case_s"] for c in cases), 1),
                "median_pairs": statistics.median(c["pairs"] for c in cases),
                "load_1min": [min(c["load"] for c in cases), max(c["load"] for c in cases)],
            }
        )
    return rows


def markdown(doc: dict) -> str:
    m, g = doc["machine"], doc["gates"]
    head = (
        f"l1_parity power on {m['machine']} ({m['cpus']} CPUs, {m['system']}, MLX {m['mlx']}), "
        f"{m['date']}; tolerance {g['tolerance']}, max_pairs {g['max_pairs']}, "
        f"samples {g['samples']}, budget {g['budget_s']}; planted on the patched mlx-lm arm "
        f"against the stock one, {g['geometry']} geometry, a {g['mode']} wait; "
        f"`mlagate run {' '.join(g['run_args'])}`.\n\n"
    )
    rows = [
        "| planted L = 1 slowdown: nominal | realised (median a cache length) | cases | pass | "
        "fail | invalid | median change (worst cache length) | process pairs (median) | case "
        "time: median (longest) | load average |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["table"]:
        real = r.get("realised") or {}
        said = ", ".join(f"{v:+.1%} at T={T}" for T, v in real.items()) or "-"
        rows.append(
            f"| +{r['size_pct']:g} % | {said} | {r['cases']} | {r['pass']} | {r['fail']} | "
            f"{r['invalid']} | {r['median_change']:+.1%} | {r['median_pairs']:g} | "
            f"{r['median_case_s']:.0f} s ({r['longest_case_s']:.0f} s) | "
            f"{r['load_1min'][0]:.1f} to {r['load_1min'][1]:.1f} |"
        )
    return head + "\n".join(rows) + "\n"


def _stage(folder: Path) -> None:
    """The benchmark's folder: links to the repository's entries (patches, suites...) and the
    plant package; its own matrix is written per run."""
    for entry in ROOT.iterdir():
        if entry.name not in ("matrix.yaml", ".git", ".venv"):
            (folder / entry.name).symlink_to(entry)
    (folder / "l1plant").mkdir()
    (folder / "l1plant" / "__init__.py").write_text(PLANT.read_text())


def _arm_id(size: float) -> str:
    return f"l1plant-{size:g}".replace(".", "p")


def _matrix(folder: Path, planted: dict[float, dict[int, float]], args) -> Path:
    """The benchmark's matrix: the repository's, with an arm per size waiting `planted[size]`
    seconds per cache length."""
    m = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    patched = m["arms"][PATCHED]
    for size, wait in planted.items():
        m["arms"][_arm_id(size)] = {
            "runtime": patched["runtime"],
            "pypi": patched["pypi"],
            "patches": patched["patches"],
            "role": "patched",
            "baseline": patched["baseline"],
            "activate": {
                "module": "l1plant",
                "function": "install",
                "install": ["l1plant"],
                "env": {
                    "L1PLANT_WAITS": json.dumps({str(t): w for t, w in wait.items()}),
                    "L1PLANT_LOG": os.environ.get("L1PLANT_LOG"),
                    "L1PLANT_MODE": args.mode,
                },
            },
        }
    m["modules"][MODULE]["geometries"] = [args.geometry]
    gates = m["suites"]["l1_parity"]["gates"]
    for setting in args.gate:
        key, value = setting.split("=", 1)
        *path, last = key.split(".")
        node = gates
        for k in path:
            node = node[k]
        node[last] = yaml.safe_load(value)
    path = folder / "matrix.yaml"
    path.write_text(yaml.dump(m, Dumper=_NoAliases, sort_keys=False))
    return path


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:
        return True  # the matrix reader refuses YAML aliases


def _gates(folder: Path, args) -> dict:
    g = yaml.safe_load((folder / "matrix.yaml").read_text())["suites"]["l1_parity"]["gates"]
    return {
        **{k: g[k] for k in ("tolerance", "samples", "max_pairs", "budget_s")},
        "geometry": args.geometry,
        "mode": args.mode,
        "run_args": args.run_args,
    }


def _gate_run(i: int, size: float, matrix: Path, args) -> list[dict]:
    out = tempfile.mkdtemp(prefix=f"mlagate-l1power-{i}-{size:g}-")
    load = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "mlagate", "run", "--matrix", str(matrix), "--suite",
           "l1_parity", "--module", MODULE, "--arm", _arm_id(size), "--out", out]  # fmt: skip
    done = subprocess.run([*cmd, *args.run_args], capture_output=True, text=True, cwd=ROOT)
    Path(out, "mlagate-run.log").write_text(done.stdout + done.stderr)
    lines = []
    for path in sorted(Path(out, "results").glob("*.json")):
        r = json.loads(path.read_text())
        if r["evidence"] != "argued":
            lines.append(_case_line(i, size, load, r))
    if not lines:
        print(f"run {i} size {size:g}: exit {done.returncode}, no result: {done.stderr[-600:]}")
    return lines


def _case_line(i: int, size: float, load: float, r: dict) -> dict:
    m = r["metrics"]
    pairs = m.get("pairs", [])
    ts = sorted({p["T"] for p in pairs})
    return {
        "run": i,
        "size": size,
        "load": round(load, 2),
        "geometry": r["geometry"]["id"],
        "verdict": r["verdict"],
        "reason": (r["reason"] or "")[:400],
        "case_s": round(r["duration_s"], 1),
        "pairs": (m.get("sequential") or {}).get("process_pairs", 0),
        "sequential": m.get("sequential"),
        "baseline_step_s": {
            T: statistics.median(p["baseline_s"] for p in pairs if p["T"] == T) for T in ts
        },
        "pair_changes": [
            {k: p[k] for k in ("pair", "T", "change", "seconds") if k in p} for p in pairs
        ],
        "l1": [
            {
                "T": int(T),
                "change": t["change"],
                "ci": t["ci"],
                "pairs": t["pairs"],
                "decided": t["decided"],
            }
            for T, t in (m.get("l1") or {}).items()
        ],  # fmt: skip
    }


def _machine() -> dict:
    import mlx.core as mx

    info = Path("/proc/cpuinfo")
    names = [ln.split(":", 1)[1].strip() for ln in info.read_text().splitlines()
             if ln.startswith("model name")] if info.exists() else []  # fmt: skip
    model = names[0] if names else platform.processor()
    return {
        "machine": model,
        "cpus": os.cpu_count(),
        "system": f"{platform.system()} {platform.machine()}",
        "mlx": mx.__version__,
        "device": str(mx.default_device()),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5, help="cases per planted size")
    ap.add_argument("--sizes", default="0,2,5,10", help="planted slowdowns, percent of the step")
    ap.add_argument("--geometry", default="deepseek-v3")
    ap.add_argument("--gate", action="append", default=[], help="KEY=VALUE of l1_parity's gates")
    ap.add_argument(
        "--steps", default=None, help='JSON {"T": seconds}: the L = 1 steps (skips sizing)'
    )
    ap.add_argument(
        "--continue", dest="resume", action="store_true",
        help="keep OUT-DIR/l1-power-NAME.jsonl's cases: counted, sizing reused, a run cut short "
        "finished, runs numbered on",
    )  # fmt: skip
    ap.add_argument(
        "--until", type=float, default=None,
        help="seconds: no case is started that may not end by then (a call of limited length)",
    )  # fmt: skip
    ap.add_argument(
        "--case-s", type=float, default=200.0,
        help="a size's expected case time before one was measured (for --until)",
    )  # fmt: skip
    ap.add_argument("--mode", default="busy", choices=("busy", "sleep", "work"), help="how to wait")
    ap.add_argument("--name", default="cpu", help="the output files' suffix")
    ap.add_argument("--out-dir", default=str(ROOT / "docs/reference/cpu"))
    ap.add_argument("run_args", nargs="*", help="more arguments for mlagate run, after --")
    return ap.parse_args()


if __name__ == "__main__":
    main()
