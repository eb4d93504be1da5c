"""l1_parity: L = 1 takes the same branch in an arm and its baseline, so a change must not
make the L = 1 step slower by more than `tolerance` (per backend: CPU and CUDA 3.2 %). The
question is one-sided: a faster L = 1 step passes, and a speed-up the interval shows (wholly
below zero) is reported as one ("faster by X %"); bitwise equality of the output is
l1_unchanged's question.

Replicated over process pairs: each round starts a fresh pair of workers (the arm's and the
baseline's; the order in which they start and in which each ABBA pair begins alternates
between rounds), builds the same model in both, and takes `samples` interleaved pairs per
cache length. A round gives one figure per cache length, the median of its paired
log-ratios log(arm_i / baseline_i): sample i of both ran back to back, so a change of machine
speed slower than a pair cancels out, and a per-process offset (one worker of the pair
faster for its whole life) stays in that round's figure. The change is the mean of the
rounds' figures with a Student t interval over rounds, so such an offset widens the interval
instead of deciding it; from 12 rounds the mean without the highest and the lowest round, with
Yuen's interval, so one anomalous process cannot hold the case (mlagate.stats.pairs_interval).

Sequential: the interval is looked at after `min_pairs` rounds and every two rounds after
(an even count: the orders stay balanced), up to `max_pairs`, each look at
look_confidence(confidence, looks) (Bonferroni alpha spending: every look holds together at
`confidence`, so stopping early keeps it; each verdict reads one end of the interval, so a
wrong one is at most (1 - confidence) / 2 a cache length: docs/performance.md, "The one-sided
rule"). Per cache length:

- pass when the interval lies below +tolerance (the arm is faster, equal, or slower by less);
- fail when it lies wholly above +tolerance (the arm's L = 1 really is slower);
- otherwise another two rounds, while the case is within `budget_s`; then invalid, naming the
  limit that stopped it and what the runner's spread between pairs allows at the last look
  (stats.last_look_floor: its floor and the tolerance it would need, as mlagate calibrate
  computes them).

Each arm's caches are primed once per case, by prefill in a fresh worker of that arm, and
saved; every round's workers load them (the same state, bitwise, that their own prefill would
give) instead of prefilling anew, which was most of a round's time. Caches whose state cannot
be set back are prefilled in every round.

A decided cache length is not sampled again. With `mlagate run --aa`, the baseline is a
second worker of the same arm: the A/A run that measures this runner's noise floor
(benchmarks/aa_false_alarms.py counts its red runs).
"""

import contextlib
import math
import os
import statistics
import time
from pathlib import Path

from mlagate import stats
from mlagate.contract.gates import UNCALIBRATED
from mlagate.harness import Failed, Invalid
from mlagate.harness.timing import stopped_by

FINGERPRINT_KEYS = ("mlx", "backend", "device", "blas", "mlx_env", "ld_preload", "python", "cpus")


def test_l1_parity(mla):
    arm, aa, gates = mla.case.arm, mla.case.aa, mla.gates
    baseline, replica = (arm, 1) if aa else (mla.ctx.matrix.arms[arm].baseline, 0)
    tol = gates["tolerance"][mla.case.backend]
    if tol == UNCALIBRATED and not aa:
        raise Invalid(_uncalibrated(mla))
    tol = None if tol == UNCALIBRATED else tol  # A/A: measured to the last look, then invalid
    budget = gates["budget_s"][mla.ctx.profile_name]
    looks = list(range(gates["min_pairs"], gates["max_pairs"] + 1, 2))
    if not looks or gates["min_pairs"] % 2:
        raise Invalid("gates.min_pairs must be even and at most gates.max_pairs")
    level = stats.look_confidence(gates["confidence"], len(looks))
    caches = [T for T in mla.profile.perf_cache_lengths if T <= gates.get("max_cache", T)]
    slots = [(arm, 0), (baseline, replica)]
    figures: dict[int, list[float]] = {T: [] for T in caches}
    rows: dict[str, dict] = {}
    pairs, stopped, last = [], "max_pairs", 0.0
    with _primed_once(mla, slots, caches) as files:
        for p in range(looks[-1]):
            open_ts = [T for T in caches if str(T) not in rows]
            if not open_ts:
                stopped = "decided"
                break
            if p in looks and mla._elapsed() + 2 * last > budget:  # two more would overrun
                stopped = "budget"
                break
            started = time.monotonic()
            for T, y, row in _round(mla, p, slots, open_ts, files):
                figures[T].append(y)
                pairs.append(row)
            last = time.monotonic() - started
            if p + 1 in looks:
                for T in open_ts:
                    row = _judge(figures[T], level, tol, T, gates["confidence"])
                    if row["decided"] or p + 1 == looks[-1]:
                        rows[str(T)] = row
    for T in caches:  # stopped on the budget: judged on the rounds taken, at the last look
        rows.setdefault(str(T), _judge(figures[T], level, tol, T, gates["confidence"]))
    if stopped == "max_pairs" and all(r["decided"] for r in rows.values()):
        stopped = "decided"  # every cache length decided, the last ones at the last look
    seq = _record(mla, rows, pairs, aa, budget, stopped, looks, level, tol)
    if tol is None:
        widest = max((max(map(abs, r["ci"])) for r in rows.values()), default=math.inf)
        raise Invalid(f"{_uncalibrated(mla)}; this A/A run's intervals reach {widest:.1%}")
    _verdict(mla, rows, tol, f"{baseline}{' (A/A)' if aa else ''}", seq, figures)


def _uncalibrated(mla) -> str:
    return (
        f"uncalibrated: suites.l1_parity.gates.tolerance has no measured value for backend "
        f"{mla.case.backend}: run mlagate calibrate first (mlagate run --aa --suite l1_parity "
        f"on this runner, then mlagate calibrate --runner {mla.case.runner} OUT --store STORE "
        "for this machine class's runs with --reuse STORE)"
    )


def _chunk(mla) -> int | None:
    return (mla.gates.get("prime_chunk") or {}).get(mla.ctx.profile_name)


@contextlib.contextmanager
def _primed_once(mla, slots: list[tuple], caches: list[int]):
    """Each arm's caches prefilled once, in a fresh worker of that arm, and saved: yields
    {(arm, T): (file, sha256 of the state)} for the rounds to load, or {} when a cache's state
    cannot be set back (the rounds then prefill). The files are removed when the case ends."""
    ours, theirs = slots
    primers = [ours] if theirs[0] == ours[0] else [ours, theirs]  # A/A: one arm, one file set
    written: list[Path] = []
    started = time.monotonic()
    try:
        mla.fresh_workers(primers)
        files = _prefill_and_save(mla, primers, caches, written)
        seconds = round(time.monotonic() - started, 3)
        mla.metric("primed_once", {"seconds": seconds, "loaded": bool(files)})
        yield files
    finally:
        for path in written:
            path.unlink(missing_ok=True)


def _prefill_and_save(mla, primers: list[tuple], caches: list[int], written: list) -> dict:
    folder = mla.ctx.out / "tmp"
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for a, r in primers:
        key = mla.build(arm=a, replica=r)[0]
        for T in caches:
            path = folder / f"{mla.case.file_stem}-{os.getpid()}-{a}-{T}.safetensors"
            written.append(path)
            reply = mla.prime(
                key, T, arm=a, replica=r, chunk=_chunk(mla), save=str(path), digest=True
            )
            if not reply["saved"]:
                return {}
            files[(a, T)] = (str(path), reply["digest"])
    return files


def _round(mla, p: int, slots: list[tuple], caches: list[int], files: dict):
    """One process pair: fresh workers (their order alternates with p), the same model built
    in both, its caches loaded from `files` (else prefilled), `samples` interleaved pairs per
    cache length; yields (T, figure, row)."""
    ours, theirs = slots
    order = [ours, theirs] if p % 2 == 0 else [theirs, ours]
    clock = time.monotonic()
    spent = {"start": 0.0, "build": 0.0, "prime": 0.0, "samples": 0.0}

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.monotonic()
        spent[phase] += now - clock
        clock = now

    mla.fresh_workers(order)
    lap("start")
    fp = [mla.ctx.pool.get(*slot).fingerprint for slot in (ours, theirs)]
    differ = [k for k in FINGERPRINT_KEYS if fp[0].get(k) != fp[1].get(k)]
    if differ:
        raise Invalid(
            f"the two workers' environments differ in {', '.join(differ)}: their timings are "
            "never compared"
        )
    keys = {slot: mla.build(arm=slot[0], replica=slot[1])[0] for slot in order}
    lap("build")
    label = {ours: "arm", theirs: "baseline"}
    for i, T in enumerate(caches):
        for a, r in order:
            path, digest = files.get((a, T), (None, None))
            reply = mla.prime(
                keys[(a, r)], T, arm=a, replica=r, chunk=_chunk(mla), load=path, digest=bool(path)
            )
            if path and reply["digest"] != digest:
                raise Invalid(
                    f"the cache of {a} at T={T} loaded in round {p} is not the one primed"
                )
        lap("prime")
        t = mla.interleaved(
            [
                {"label": label[s], "key": keys[s], "L": 1, "arm": s[0], "replica": s[1]}
                for s in order
            ],
            samples=mla.gates["samples"],
        )
        lap("samples")
        logs = [math.log(a / b) for a, b in zip(t["arm"], t["baseline"], strict=True)]
        y = stats.median(logs)
        yield (
            T,
            y,
            {
                "pair": p,
                "T": T,
                "first": label[order[0]],
                "change": math.expm1(y),
                "arm_s": stats.median(t["arm"]),
                "baseline_s": stats.median(t["baseline"]),
                **(
                    {"seconds": {k: round(v, 3) for k, v in spent.items()}}
                    if i == len(caches) - 1
                    else {}
                ),
            },
        )


def _judge(ys: list[float], level: float, tol: float | None, T: int, confidence: float) -> dict:
    """One cache length's interval over process pairs and its verdict (None: undecided; always
    with no tolerance, an uncalibrated runner's A/A run)."""
    centre, lo, hi, estimator = stats.pairs_interval(ys, level)
    lo, hi = math.expm1(lo), math.expm1(hi)
    below, above = tol is not None and hi <= tol, tol is not None and lo > tol  # one-sided
    decided = "pass" if below else "fail" if above else None
    return {
        "T": T,
        "change": math.expm1(centre),
        "ci": (lo, hi),
        "estimator": estimator,
        "look_confidence": level,
        "confidence": confidence,
        "pairs": len(ys),
        "between_pairs_sd": statistics.stdev(ys) if len(ys) > 1 else None,
        "decided": decided,
    }


def _record(mla, rows, pairs, aa, budget, stopped, looks, level, tol) -> dict:
    mla.metric("l1", rows)
    mla.metric("pairs", pairs)
    mla.metric("aa", aa)
    seq = {
        "budget_s": budget,
        "used_s": round(mla._elapsed(), 3),
        "process_pairs": max((r["pair"] for r in pairs), default=-1) + 1,
        "samples_per_pair": mla.gates["samples"],
        "samples": len(pairs) * mla.gates["samples"],
        "planned_looks": len(looks),
        "max_pairs": looks[-1],
        "tolerance": tol,
        "look_confidence": level,
        "confidence": mla.gates["confidence"],
        "stopped": stopped,
    }
    mla.metric("sequential", seq)
    return seq


def _verdict(mla, rows: dict, tol: float, who: str, seq: dict, figures: dict) -> None:
    def said(r: dict) -> str:
        lo, hi = r["ci"]
        return (
            f"{r['change']:+.1%} at T={r['T']} (interval {lo:+.1%}..{hi:+.1%} at "
            f"{r['confidence']:.0%} over {r['pairs']} process pairs; {mla.case.arm} vs {who})"
        )

    failed = [r for r in rows.values() if r["decided"] == "fail"]
    if failed:
        shown = "; ".join(said(r) for r in failed)
        raise Failed(["too_slow"], f"L = 1 slower beyond the {_pct(tol)} tolerance: {shown}")
    open_rows = [r for r in rows.values() if r["decided"] is None]
    if open_rows:
        floor = stats.last_look_floor(
            {r["T"]: figures[r["T"]] for r in open_rows}, seq["max_pairs"], seq["look_confidence"]
        )
        mla.metric("floor", floor)
        raise Invalid(
            f"undecided: the interval straddles the {_pct(tol)} tolerance, "
            f"{stopped_by(seq, 'process pairs')}: "
            + "; ".join(said(r) for r in open_rows)
            + f"; {_floor_said(floor, tol)}"
        )
    mla.pass_reason(_passed(rows, tol))


def _pct(x: float) -> str:
    return f"{x * 100:.3g}%"


def _passed(rows: dict, tol: float) -> str:
    """A pass's reason: the L = 1 step within the tolerance, and a speed-up where an interval
    lies wholly below zero."""
    faster = [
        f"faster by {-r['change']:.1%} at T={r['T']} (interval {lo:+.1%}..{hi:+.1%})"
        for r in rows.values()
        for lo, hi in [r["ci"]]
        if hi < 0
    ]
    worst = max(r["ci"][1] for r in rows.values())
    said = f"L = 1 not slower beyond the {_pct(tol)} tolerance (highest interval end {worst:+.1%})"
    return said + (f"; {'; '.join(faster)}" if faster else "")


def _floor_said(floor: dict, tol: float) -> str:
    """What the runner's spread between process pairs allows at the last look, in words."""
    n, needed = floor["pairs"], floor["needed_tolerance"]
    spread = (
        f"at this case's spread between process pairs the interval at the last look ({n} pairs) "
        f"is +-{floor['floor']:.1%} wide (the runner's measured floor)"
    )
    if any(lo <= tol < hi for lo, hi in floor["intervals"].values()):
        return (
            f"{spread}: {n} process pairs are too few here, it needs a tolerance of "
            f"{_pct(needed)} (as mlagate calibrate computes it)"
        )
    return f"{spread}: {n} pairs would decide it; the limit above stopped it first"
