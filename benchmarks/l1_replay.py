"""Replay of l1_parity's decision procedure on recorded process pairs: what a gate setting would
decide at planted L = 1 slowdowns, without running a worker.

    python benchmarks/l1_replay.py AA.jsonl... [--cases 200] [--sizes 0,2,5,10]
        [--setting NAME:tol=0.08,min=4,max=12,budget=300]... [--json FILE] [--markdown FILE]

AA.jsonl are A/A gate runs written by benchmarks/aa_false_alarms.py (one line a case, with every
process pair's change per cache length: `pair_changes`). Their pairs' log-ratios are pooled per
geometry and cache length. A replayed case draws one geometry and then, round by round, one
recorded pair per open cache length (with replacement), shifted by log(1 + size): a planted
slowdown of that size on top of the runner's measured noise between process pairs. The loop,
the looks, the intervals, the budget check and the verdicts are the suite's own
(test_l1_parity in suites/performance/test_l1_parity.py, driven with these rounds; a round takes
the median recorded round time). Per setting and size: decided pass / fail / invalid counts and
the median pairs and simulated case time.

What it cannot show: noise that is not in the recorded pairs (a loaded machine, a different
model), the dependence between the pairs of one real case (pooling treats them as exchangeable),
and the slowdown's interaction with the machine (benchmarks/l1_power.py measures that).
"""

import argparse
import contextlib
import importlib.util
import json
import math
import random
import statistics
from pathlib import Path
from types import SimpleNamespace

from mlagate.harness import Failed, Invalid

ROOT = Path(__file__).resolve().parents[1]


def _suite():
    spec = importlib.util.spec_from_file_location(
        "l1_parity_suite", ROOT / "suites/performance/test_l1_parity.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pools(paths: list[Path]) -> tuple[dict, float]:
    """{geometry: {T: [log-ratio of each recorded pair]}} and the median round time (s)."""
    out: dict = {}
    rounds = []
    for path in paths:
        for line in path.read_text().splitlines():
            case = json.loads(line)
            for p in case.get("pair_changes", []):
                out.setdefault(case["geometry"], {}).setdefault(p["T"], []).append(
                    math.log1p(p["change"])
                )
                if "seconds" in p:
                    rounds.append(sum(p["seconds"].values()))
    return out, statistics.median(rounds) if rounds else 3.0


class _Case:
    def __init__(self, setting: dict, caches: list[int], round_s: float):
        self.case = SimpleNamespace(arm="a", aa=True, backend="cpu", runner="replay")
        self.gates = {
            "tolerance": {"cpu": setting["tol"]},
            "samples": 11,
            "min_pairs": int(setting["min"]),
            "max_pairs": int(setting["max"]),
            "confidence": setting.get("confidence", 0.95),
            "budget_s": {"quick": setting["budget"]},
        }
        self.ctx = SimpleNamespace(profile_name="quick")
        self.profile = SimpleNamespace(perf_cache_lengths=caches)
        self.metrics: dict = {}
        self.clock, self.round_s = 0.0, round_s

    def metric(self, key, value):
        self.metrics[key] = value

    def _elapsed(self) -> float:
        return self.clock


def replay(suite, pool: dict, setting: dict, size: float, rng, round_s: float) -> dict:
    """One replayed case: its verdict, process pairs and simulated seconds."""
    geometry = rng.choice(sorted(pool))
    by_t = pool[geometry]
    shift = math.log1p(size / 100)
    mla = _Case(setting, sorted(by_t), round_s)

    @contextlib.contextmanager
    def primed(*_):
        yield {}

    def round_(case, p, slots, caches, files):
        case.clock += case.round_s
        for T in caches:
            yield T, rng.choice(by_t[T]) + shift, {"pair": p, "T": T, "change": 0.0}

    suite._primed_once, suite._round = primed, round_
    try:
        suite.test_l1_parity(mla)
        verdict = "pass"
    except Failed:
        verdict = "fail"
    except Invalid:
        verdict = "invalid"
    seq = mla.metrics.get("sequential") or {}
    return {"verdict": verdict, "pairs": seq.get("process_pairs", 0), "seconds": mla.clock}


def _setting(text: str) -> dict:
    name, _, rest = text.partition(":")
    values = dict(kv.split("=") for kv in rest.split(","))
    return {"name": name, **{k: float(v) for k, v in values.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("aa", nargs="+", type=Path)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--sizes", default="0,2,5,10")
    ap.add_argument("--setting", action="append", default=[])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    settings = [_setting(s) for s in args.setting] or [
        _setting("shipped:tol=0.08,min=4,max=12,budget=300")
    ]
    pool, round_s = pools(args.aa)
    suite, rng = _suite(), random.Random(args.seed)
    rows = []
    for setting in settings:
        for size in [float(s) for s in args.sizes.split(",")]:
            got = [replay(suite, pool, setting, size, rng, round_s) for _ in range(args.cases)]
            rows.append(
                {
                    "setting": setting,
                    "size_pct": size,
                    "cases": len(got),
                    **{v: sum(g["verdict"] == v for g in got) for v in ("pass", "fail", "invalid")},
                    "median_pairs": statistics.median(g["pairs"] for g in got),
                    "median_case_s": round(statistics.median(g["seconds"] for g in got), 1),
                    "longest_case_s": round(max(g["seconds"] for g in got), 1),
                }
            )
    md = _markdown(rows, args.aa, round_s)
    print(md)
    if args.json:
        args.json.write_text(json.dumps({"round_s": round_s, "rows": rows}, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(md)


def _markdown(rows: list[dict], paths: list[Path], round_s: float) -> str:
    lines = [
        f"Replayed from {', '.join(p.name for p in paths)} (a round: {round_s:.1f} s, the "
        "recorded median)",
        "",
        "| setting | planted | pass | fail | invalid | pairs (median) | case time: median "
        "(longest) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["setting"]
        lines.append(
            f"| {s['name']}: tolerance {s['tol'] * 100:g} %, pairs {s['min']:.0f} to "
            f"{s['max']:.0f}, "
            f"budget {s['budget']:.0f} s | +{r['size_pct']:g} % | {r['pass']} | {r['fail']} | "
            f"{r['invalid']} | {r['median_pairs']:g} | {r['median_case_s']:.0f} s "
            f"({r['longest_case_s']:.0f} s) |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
