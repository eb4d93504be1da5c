"""Replay of l1_parity's decision procedure on recorded process pairs: what a gate setting would
decide at planted L = 1 slowdowns, without running a worker.

    python benchmarks/l1_replay.py FILE.jsonl... [--cases 200] [--sizes=-3,0,2,5,10]
        [--setting NAME:tol=0.08,min=4,max=12,budget=300]... [--rule-at REV]
        [--recorded] [--json FILE] [--markdown FILE]

FILE.jsonl are A/A gate runs written by benchmarks/aa_false_alarms.py (one line a case, with every
process pair's change per cache length: `pair_changes`). Their pairs' log-ratios are pooled per
geometry and cache length. A replayed case draws one geometry and then, round by round, one
recorded pair per open cache length (with replacement), shifted by log(1 + size): a planted
change of that size (negative: a faster arm) on top of the runner's measured noise between
process pairs.

`--recorded`: FILE.jsonl are benchmarks/l1_power.py case lines instead, replayed as they were
measured, per planted size: a replayed case draws one recorded case of the size and, round by
round, one of that case's own pairs per cache length (`pair_changes`); lines written before they
carried their pairs are drawn from a normal of the case's recorded change and its spread between
pairs (recovered from its interval: the t interval's half-width times sqrt(pairs) over the
quantile), which is an approximation, said so in the table.

The loop, the looks, the intervals, the budget check and the verdicts are the suite's own
(test_l1_parity in suites/performance/test_l1_parity.py, driven with these rounds; a round takes
the median recorded round time); `--rule-at REV` replays the suite of that commit as well
(`git show REV:...`), so one table holds the rule before and after a change. Per rule, setting
and size: decided pass / fail / invalid counts, the false verdicts (a fail of a change not
slower beyond the tolerance, a pass of one that is), the cases decided within the budget, the
median pairs and simulated case time.

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
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

from mlagate.harness import Failed, Invalid

ROOT = Path(__file__).resolve().parents[1]
SUITE = "suites/performance/test_l1_parity.py"


def _suite(rev: str | None = None):
    path = ROOT / SUITE
    if rev:
        text = subprocess.run(
            ["git", "show", f"{rev}:{SUITE}"], capture_output=True, text=True, cwd=ROOT, check=True
        ).stdout
        path = Path(tempfile.mkdtemp(prefix="l1-replay-")) / "test_l1_parity.py"
        path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"l1_parity_suite_{rev or 'here'}", path)
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


def recorded(paths: list[Path]) -> tuple[dict, float, bool]:
    """{size: [a draw(T, rng) per recorded case]}, the median round time (s) and whether any
    case had to be drawn from a normal (no recorded pairs)."""
    from scipy.stats import t as student

    out: dict = {}
    rounds, normal = [], False
    for path in paths:
        for line in path.read_text().splitlines():
            case = json.loads(line)
            if not case.get("l1"):
                continue
            if case.get("pair_changes"):
                by_t: dict = {}
                for p in case["pair_changes"]:
                    by_t.setdefault(p["T"], []).append(math.log1p(p["change"]))
                    if "seconds" in p:
                        rounds.append(sum(p["seconds"].values()))
                draw = lambda T, rng, by_t=by_t: rng.choice(by_t[T])  # noqa: E731
            else:
                normal = True
                level = case["sequential"]["look_confidence"]
                spread = {}
                for t in case["l1"]:
                    n, (lo, hi) = t["pairs"], t["ci"]
                    q = student.ppf((1 + level) / 2, n - 3 if n >= 12 else n - 1)
                    sd = (math.log1p(hi) - math.log1p(lo)) / 2 * math.sqrt(n) / q
                    spread[t["T"]] = (math.log1p(t["change"]), sd)
                draw = lambda T, rng, spread=spread: rng.gauss(*spread[T])  # noqa: E731
                rounds.append(case["case_s"] / max(1, case["pairs"]))
            out.setdefault(case["size"], []).append((sorted(t["T"] for t in case["l1"]), draw))
    return out, statistics.median(rounds) if rounds else 3.0, normal


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

    def pass_reason(self, reason: str) -> None:
        self.reason = reason

    def _elapsed(self) -> float:
        return self.clock


def replay(suite, caches: list[int], draw, setting: dict, round_s: float) -> dict:
    """One replayed case of rounds draw(T) -> log-ratio: its verdict, pairs and seconds."""
    mla = _Case(setting, caches, round_s)

    @contextlib.contextmanager
    def primed(*_):
        yield {}

    def round_(case, p, slots, caches, files):
        case.clock += case.round_s
        for T in caches:
            y = draw(T)
            yield T, y, {"pair": p, "T": T, "change": math.expm1(y)}

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


def _draw(rng, size: float, source: dict, rec: bool) -> tuple[list[int], object]:
    """One replayed case's cache lengths and its draw(T) -> a round's log-ratio."""
    if rec:
        caches, draw = rng.choice(source[size])
        return caches, lambda T: draw(T, rng)
    by_t, shift = source[rng.choice(sorted(source))], math.log1p(size / 100)
    return sorted(by_t), lambda T: rng.choice(by_t[T]) + shift


def _setting(text: str) -> dict:
    name, _, rest = text.partition(":")
    values = dict(kv.split("=") for kv in rest.split(","))
    return {"name": name, **{k: float(v) for k, v in values.items()}}


def _row(rule: str, setting: dict, size: float, got: list[dict], rec: bool) -> dict:
    """One rule, setting and size's counts. False verdicts answer the suite's question (slower
    beyond the tolerance?) by the planted size; a recorded case planted inside the tolerance
    realised more than its nominal size on some machines, so it is not counted (None)."""
    slower = size / 100 > setting["tol"]
    false = sum(g["verdict"] == ("pass" if slower else "fail") for g in got)
    if rec and 0 < size / 100 <= setting["tol"]:
        false = None
    return {
        "rule": rule,
        "setting": setting,
        "size_pct": size,
        "cases": len(got),
        **{v: sum(g["verdict"] == v for g in got) for v in ("pass", "fail", "invalid")},
        "false": false,
        "decided": sum(g["verdict"] != "invalid" for g in got),
        "median_pairs": statistics.median(g["pairs"] for g in got),
        "median_case_s": round(statistics.median(g["seconds"] for g in got), 1),
        "longest_case_s": round(max(g["seconds"] for g in got), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--sizes", default="0,2,5,10")
    ap.add_argument("--setting", action="append", default=[])
    ap.add_argument("--rule-at", default=None, help="also replay the suite of this commit")
    ap.add_argument("--recorded", action="store_true", help="FILES are l1_power case lines")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    settings = [_setting(s) for s in args.setting] or [
        _setting("shipped:tol=0.032,min=4,max=56,budget=180")
    ]
    rules = [(args.rule_at, _suite(args.rule_at))] if args.rule_at else []
    rules.append(("this commit", _suite()))
    if args.recorded:
        source, round_s, normal = recorded(args.files)
        sizes = sorted(source)
    else:
        source, round_s = pools(args.files)
        sizes, normal = [float(s) for s in args.sizes.split(",")], False
    rows = []
    for rule, suite in rules:
        for setting in settings:
            for size in sizes:
                rng = random.Random(args.seed)  # the same seed for every rule
                got = [
                    replay(suite, *_draw(rng, size, source, args.recorded), setting, round_s)
                    for _ in range(args.cases)
                ]
                rows.append(_row(rule, setting, size, got, args.recorded))
    md = _markdown(rows, args.files, round_s, args.recorded, normal)
    print(md)
    if args.json:
        doc = {"round_s": round_s, "recorded": args.recorded, "rows": rows}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(md)


def _markdown(rows: list[dict], paths: list[Path], round_s: float, rec: bool, normal: bool) -> str:
    how = (
        "each recorded case re-drawn from its own pairs"
        + (
            " (cases without recorded pairs from a normal of their change and spread)"
            if normal
            else ""
        )
        if rec
        else "A/A pairs pooled per geometry and cache length, shifted by the planted change"
    )
    lines = [
        f"Replayed from {', '.join(p.name for p in paths)}: {how} (a round: {round_s:.1f} s, "
        f"the recorded median). `{' '.join(sys.argv[1:])}`",
        "",
        "| rule | setting | planted | pass | fail | invalid | false verdicts | decided within the "
        "budget | pairs (median) | case time: median (longest) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["setting"]
        lines.append(
            f"| {r['rule']} | {s['name']}: tolerance {s['tol'] * 100:g} %, pairs {s['min']:.0f} "
            f"to {s['max']:.0f}, budget {s['budget']:.0f} s | {r['size_pct']:+g} % | {r['pass']} | "
            f"{r['fail']} | {r['invalid']} | {'-' if r['false'] is None else r['false']} | "
            f"{r['decided']} of {r['cases']} | "
            f"{r['median_pairs']:g} | {r['median_case_s']:.0f} s ({r['longest_case_s']:.0f} s) |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
