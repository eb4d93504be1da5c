"""Timing in a case: cached primes and interleaved (ABBA) timed samples, calibrated in loops.

`Timing` is mixed into the case API (mlagate.harness.case.CaseRun): suites call mla.prime and
mla.interleaved. It uses the case's `case`, `profile`, `result` and `_worker(arm, replica)`.
"""

from __future__ import annotations

import math

from mlagate.harness.errors import Invalid

MAX_LOOPS = 64


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
    ) -> dict:
        """Prime and keep a cache of T tokens in the arm's worker, for timed samples."""
        return self._worker(arm or self.case.arm, replica).call(
            "prime",
            self.profile.timeout_s,
            key=key,
            T=T,
            seed=seed,
            horizon=horizon,
            chunk=self.profile.prefill_chunk,
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
        samples = samples or self.profile.samples
        if samples % 2 == 0:
            raise Invalid(
                f"{samples} timed samples asked (the suite's gates.samples or the profile's "
                "samples): the count must be odd, the median is a sample"
            )
        warmup = self.profile.warmup if warmup is None else warmup
        label_path: dict[str, str] = {}
        times: dict[str, list[float]] = {s["label"]: [] for s in series}

        loops: dict[str, int] = {s["label"]: 1 for s in series}

        def one(s: dict) -> dict:
            arm = s.get("arm") or self.case.arm
            return self._worker(arm, s.get("replica", 0)).call(
                "sample",
                self.profile.timeout_s,
                key=s["key"],
                L=s["L"],
                force=s.get("force"),
                loops=loops[s["label"]],
            )

        for s in series:
            warm = []
            for _ in range(max(1, warmup)):
                r = one(s)
                warm.append(r["seconds"])
                label_path.setdefault(s["label"], s.get("force") or r["path"])
            loops[s["label"]] = calibrated_loops(self.profile.sample_min_s, min(warm))
        abba = [series, list(reversed(series))]
        for i in range(warmup):
            for s in abba[i % 2]:
                one(s)
        for i in range(samples):
            for s in abba[i % 2]:
                r = one(s)
                if r["path"] != label_path[s["label"]]:
                    raise Invalid(
                        f"{s['label']}: a timed sample ran {r['path']}, the row is labelled "
                        f"{label_path[s['label']]}"
                    )
                times[s["label"]].append(r["seconds"])
        self.result.observations.append(
            {
                "timed": {
                    s["label"]: {
                        "path": label_path[s["label"]],
                        "L": s["L"],
                        "arm": s.get("arm") or self.case.arm,
                        "seconds": times[s["label"]],
                        "loops": loops[s["label"]],
                    }
                    for s in series
                }
            }
        )
        return times
