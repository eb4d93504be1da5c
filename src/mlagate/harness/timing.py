"""Timing in a case: cached primes and interleaved (ABBA) timed samples, calibrated in loops.

`Timing` is mixed into the case API (mlagate.harness.case.CaseRun): suites call mla.prime and
mla.interleaved. It uses the case's `case`, `profile`, `result` and `_worker(arm, replica)`.
"""

from __future__ import annotations

import math
import time

from mlagate.harness.errors import Invalid

MAX_LOOPS = 64
LOOK_STEP = 6  # samples added at each look after the first (even: the count stays odd)


def calibrated_loops(sample_min_s: float, fastest_s: float) -> int:
    """How many times a sample repeats its step so that the fastest series lasts sample_min_s."""
    if sample_min_s <= 0 or fastest_s <= 0:
        return 1
    return max(1, min(MAX_LOOPS, math.ceil(sample_min_s / fastest_s)))


class Timing:
    """The case API's timing methods (mixed into CaseRun)."""

    def prime(
        self,
        key: str,
        T: int,
        arm: str | None = None,
        replica: int = 0,
        horizon: int = 64,
        seed: int = 1,
        chunk: int | None = None,
        save: str | None = None,
        load: str | None = None,
        digest: bool = False,
    ) -> dict:
        """Prime and keep a cache of T tokens in the arm's worker, for timed samples, prefilled
        in chunks of `chunk` tokens (default: the profile's prefill_chunk). `save`: also write
        the primed state to that file (the reply's `saved` says whether the caches allowed it);
        `load`: take the state from such a file, written by the same arm's worker for the same
        model, instead of prefilling; `digest`: the reply carries the sha256 of the state."""
        return self._worker(arm or self.case.arm, replica).call(
            "prime",
            self.profile.timeout_s,
            key=key,
            T=T,
            seed=seed,
            horizon=horizon,
            chunk=chunk or self.profile.prefill_chunk,
            **({"save": save} if save else {}),
            **({"load": load} if load else {}),
            **({"digest": True} if digest else {}),
        )

    def interleaved(
        self, series: list[dict], samples: int | None = None, warmup: int | None = None
    ) -> dict[str, list[float]]:
        """Timed samples of several series, interleaved: forward order, then reversed (ABBA...).

        A series is {"label", "key", "L", optional "arm", "replica", "force"}; each must have
        been primed. Every sample's counters must show the path of the series' first warm-up
        (or its forced path): a sample that ran another path makes the case invalid.

        A sample repeats its step `loops` times and keeps the mean (pyperf's calibration): each
        series gets the count that makes its fastest warm-up last the profile's `sample_min_s`
        (at most MAX_LOOPS), so timer and scheduler jitter is averaged out of short steps. The
        warm-ups then run again, interleaved, at the calibrated counts (untimed): the first
        timed samples of a fresh worker were up to 30 % slow without them.
        """
        samples = self._odd(samples or self.profile.samples)
        run = _Run(self, series, warmup)
        run.take(samples)
        run.record()
        return run.times

    def until_decided(
        self, series: list[dict], judge, gates: dict, budget_s: float
    ) -> tuple[dict[str, list[float]], object, dict]:
        """Interleaved samples taken in looks until judge decides (sequential, within one
        worker): `gates["samples"]` first, then LOOK_STEP more a look, up to
        `gates["max_samples"]`, while the case's time is within budget_s (`sequential`).

        judge(times, confidence) returns a verdict (None: undecided). Returns (times, the last
        verdict, the record of the stopping: budget, samples used, looks, why it stopped).
        """
        run = _Run(self, series, None)
        verdict, record = sequential(
            self._odd(gates["samples"]),
            gates["max_samples"],
            gates["confidence"],
            budget_s,
            self._elapsed,
            lambda n: run.take(n - len(run.times[series[0]["label"]])),
            lambda level: judge(run.times, level),
        )
        run.record()
        return run.times, verdict, record

    def fresh_workers(self, slots: list[tuple[str, int]]) -> None:
        """Close the workers of these (arm, replica) slots and start fresh ones in this order:
        a new process pair, so a per-process offset is drawn anew."""
        for arm, replica in slots:
            self.ctx.pool.retire(arm, replica)
        for arm, replica in slots:
            self._worker(arm, replica)

    def _elapsed(self) -> float:
        return time.perf_counter() - self._t0

    @staticmethod
    def _odd(samples: int) -> int:
        if samples % 2 == 0:
            raise Invalid(
                f"{samples} timed samples asked (the suite's gates.samples or the profile's "
                "samples): the count must be odd, the median is a sample"
            )
        return samples


def sequential(
    first: int, most: int, confidence: float, budget_s: float, elapsed, take, judge
) -> tuple[object, dict]:
    """Looks at first, first + LOOK_STEP, ... up to most samples: take(n) brings the samples to
    n, then judge(level) returns a verdict or None (undecided). Each look is at
    look_confidence(confidence, looks), so all looks hold together at `confidence` and stopping
    at the first decided one keeps it. A look after the first is not started when the case's
    time (elapsed()) plus the last look's would overrun budget_s. Returns (the last verdict,
    the record of the stopping: metrics.sequential)."""
    from mlagate import stats

    plan = list(range(first, max(first, most) + 1, LOOK_STEP))
    level = stats.look_confidence(confidence, len(plan))
    verdict, stopped, last, taken = None, "max_samples", 0.0, first
    for n in plan:
        started = time.monotonic()
        if n > first and elapsed() + last > budget_s:
            stopped = "budget"
            break
        take(n)
        taken, last = n, time.monotonic() - started
        verdict = judge(level)
        if verdict is not None:
            stopped = "decided"
            break
    return verdict, {
        "budget_s": budget_s,
        "used_s": round(elapsed(), 3),
        "samples": taken,
        "max_samples": plan[-1],
        "looks": plan.index(taken) + 1,
        "planned_looks": len(plan),
        "look_confidence": level,
        "confidence": confidence,
        "stopped": stopped,
    }


def stopped_by(record: dict, unit: str = "samples") -> str:
    """Which limit ended an undecided sequential measurement, in words, from its record
    (metrics.sequential): the budget, or the last look (`max_samples`, or `max_pairs` counted
    in process pairs)."""
    n = record["process_pairs"] if unit == "process pairs" else record["samples"]
    used, budget = record["used_s"], record["budget_s"]
    if record["stopped"] == "budget":
        return (
            f"stopped by the {budget:.0f} s budget after {n} {unit} and {used:.0f} s (one more "
            "look would overrun it)"
        )
    if record["stopped"] in ("max_samples", "max_pairs"):
        gate = "max_pairs" if unit == "process pairs" else "max_samples"
        return (
            f"stopped at its {unit} limit ({gate} = {n}, the last look) after {used:.0f} s of "
            f"the {budget:.0f} s budget"
        )
    return f"stopped {record['stopped']} after {n} {unit} and {used:.0f} s"


def stopped_at_each(name: str, judged: int, record: dict, fixed: dict[int, int]) -> str:
    """What ended the sampling at every point of an undecided case measured in one worker, in
    words: the judged point's limit (stopped_by) and the other points' fixed counts of samples
    (reported, not judged), so a reason names them all."""
    by_count: dict[int, list[int]] = {}
    for k in sorted(fixed):
        by_count.setdefault(fixed[k], []).append(k)
    said = [
        f"{name}={', '.join(map(str, ks))}: {n} samples {'each ' if len(ks) > 1 else ''}(a fixed "
        "count: reported, not judged)"
        for n, ks in by_count.items()
    ]
    return "; ".join([*said, f"{name}={judged}: judged, {stopped_by(record)}"])


class _Run:
    """One interleaved measurement of some series: calibrated once, sampled in one or more
    takes (ABBA continues across takes), recorded once.

    Series in two or more workers rewarm before each sample (op `sample`): a sample that
    follows another process's would otherwise pay for that process's use of the caches. Series
    of one worker follow each other on the same primed cache and skip it."""

    def __init__(self, case, series: list[dict], warmup: int | None):
        self.case, self.series = case, series
        self.rewarm = len({self._slot(s) for s in series}) > 1
        self.label_path: dict[str, str] = {}
        self.times: dict[str, list[float]] = {s["label"]: [] for s in series}
        self.loops: dict[str, int] = {s["label"]: 1 for s in series}
        warmup = case.profile.warmup if warmup is None else warmup
        for s in series:
            warm = []
            for _ in range(max(1, warmup)):
                r = self.one(s)
                warm.append(r["seconds"])
                self.label_path.setdefault(s["label"], s.get("force") or r["path"])
            self.loops[s["label"]] = calibrated_loops(case.profile.sample_min_s, min(warm))
        self.abba = [series, list(reversed(series))]
        for i in range(warmup):
            for s in self.abba[i % 2]:
                self.one(s)
        self.taken = 0

    def _slot(self, s: dict) -> tuple[str, int]:
        return (s.get("arm") or self.case.case.arm, s.get("replica", 0))

    def one(self, s: dict) -> dict:
        return self.case._worker(*self._slot(s)).call(
            "sample",
            self.case.profile.timeout_s,
            key=s["key"],
            L=s["L"],
            force=s.get("force"),
            loops=self.loops[s["label"]],
            rewarm=self.rewarm,
        )

    def take(self, samples: int) -> None:
        for _ in range(samples):
            for s in self.abba[self.taken % 2]:
                r = self.one(s)
                if r["path"] != self.label_path[s["label"]]:
                    raise Invalid(
                        f"{s['label']}: a timed sample ran {r['path']}, the row is labelled "
                        f"{self.label_path[s['label']]}"
                    )
                self.times[s["label"]].append(r["seconds"])
            self.taken += 1

    def record(self) -> None:
        self.case.result.observations.append(
            {
                "timed": {
                    s["label"]: {
                        "path": self.label_path[s["label"]],
                        "L": s["L"],
                        "arm": s.get("arm") or self.case.case.arm,
                        "seconds": self.times[s["label"]],
                        "loops": self.loops[s["label"]],
                    }
                    for s in self.series
                }
            }
        )


def step_growth_ci(lo: dict, hi: dict, level: float, seed: int = 0) -> tuple[float, float, float]:
    """How much a wide step's cost grows from one context to a longer one, in narrow steps at the
    longer: (median(hi["verify"]) - median(lo["verify"])) / median(hi["decode"]), with a bootstrap
    interval (percentile) that resamples each context's rounds whole (a round's verify and decode
    steps ran back to back, so a burst of load stays paired within it)."""
    from mlagate import stats

    def growth(lo_rounds, hi_rounds) -> float:
        pick = lambda t, rounds, key: [t[key][int(i)] for i in rounds]  # noqa: E731
        v_lo, v_hi = (
            stats.median(pick(lo, lo_rounds, "verify")),
            stats.median(pick(hi, hi_rounds, "verify")),
        )
        return (v_hi - v_lo) / stats.median(pick(hi, hi_rounds, "decode"))

    for t in (lo, hi):
        if len(t["verify"]) != len(t["decode"]) or not t["verify"]:
            raise ValueError("step_growth_ci needs equally many verify and decode steps a context")
    rounds = (list(range(len(lo["verify"]))), list(range(len(hi["verify"]))))
    return (growth(*rounds), *stats._bootstrap(rounds, growth, level, seed))
