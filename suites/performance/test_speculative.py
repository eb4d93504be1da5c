"""speculative: the runtime's own draft-model speculation against plain decoding of the same
prompt, greedy, over prompt lengths, per module and arm.

Each case writes tiny checkpoints in the runtime's own format into the cache (target, and a
perturbed copy as a second draft; mlagate.checkpoints), loads them with the runtime's own
loader, and, for every context length P, primes the prompt's first P - 1 tokens into the
target's and each draft's caches, then interleaves (ABBA) timed runs of:

- plain: the runtime's generate_step for N tokens;
- spec:self: speculative_generate_step with the same checkpoint as draft (acceptance 100 %);
- spec:perturbed: the same with the perturbed copy as draft (acceptance measured);
- verify: one target step of num_draft + 1 tokens (the verify step alone).

Every row carries its path proof: plain decoding must absorb (L = 1), and every verify step
of a series must take one path, the same as the timed verify step's. Rows go to
metrics["rows"] (docs/speculative.md).

Gates: greedy speculative output must be token-identical to plain decoding of the same
model at every context and every sample (a difference fails the case; the first divergence
and plain decoding's top-two margin there are recorded), and the self-draft's throughput
ratio spec / plain at the longest context must keep at least `min_ratio_retained` of its
value at the shortest (speculation must not lose ground with context).

The ground-kept gate is sequential: while its interval straddles the bound, plain decoding
and the self draft take 6 more timed runs at the shortest and the longest context, up
to `max_samples` a series, within `budget_s`; every look at look_confidence(confidence,
looks), so stopping at the first decided look keeps the stated confidence
(metrics.sequential: the budget, the runs used, the looks, why it stopped).

The run's mechanics (settings, checkpoints, the timed runs and their path proof) are in
mlagate.harness.speculative_run; this file holds the gates, the two judgments and the figures.
"""

import pytest

from mlagate import stats
from mlagate.harness import Failed, Invalid, speculative_run
from mlagate.harness.timing import sequential
from mlagate.worker.speculation import TOP

pytestmark = pytest.mark.mla_checkpoints


def test_speculative(mla):
    cfg = speculative_run.Settings.of(mla)
    target, drafts, made = speculative_run.models(mla)
    mla.metric("checkpoints", made)
    mla.metric("settings", cfg.metric())
    measured = speculative_run.measure(mla, cfg, target, drafts)
    mla.metric("paths", measured.paths)
    _token_identity(mla, measured.mismatches)
    if measured.unproven:
        raise Invalid(measured.unproven[0])
    retained = _sampled_until_decided(mla, cfg, measured, target, drafts)
    undecidable = _token_identity(mla, measured.mismatches)
    if measured.unproven:
        raise Invalid(measured.unproven[0])
    _ground_kept(mla, measured, retained, undecidable)


def _token_identity(mla, mismatches: list[dict]) -> str | None:
    """The token-identity gate: a divergence from plain decoding decided by at least the tie
    margin fails the case; one only at near-ties is undecidable (the message returned)."""
    variant_dtype = speculative_run.variant_dtype(mla)
    budget = _tie_margin(mla)
    decisive = [m for m in mismatches if speculative_run.decisive(m, budget)]
    mla.metric(
        "token_identity",
        {
            "mismatches": mismatches[:5],
            "count": len(mismatches),
            "decisive": len(decisive),
            "tie_margin": budget,
        },
    )
    if not mismatches:
        return None
    m = (decisive or mismatches)[0]
    got, plain = (speculative_run.token_at(m[key], m["at"]) for key in ("got", "plain"))
    where = f"first at P={m['context']} ({m['series']}), token {m['at']}: {got} vs plain's {plain}"
    gap = (
        f"plain preferred its token by {m['gap']:.3g} in log-prob"
        if m["gap"] is not None
        else f"plain ranked the run's token outside its top {TOP} (gap at least "
        f"{m['gap_at_least']})"
    )
    if decisive:
        raise Failed(
            ["numerical_mismatch"],
            f"greedy speculative output differs from plain decoding in {len(mismatches)} "
            f"run(s): {where}; {gap}, above the tie margin {budget}",
            {"mismatches": len(mismatches), "decisive": len(decisive)},
        )
    return (
        f"undecidable: greedy outputs diverged only at near-ties ({len(mismatches)} "
        f"run(s), {where}; {gap}, below the {variant_dtype} tie margin {budget}): the "
        "arithmetic, not the runtime, may have chosen"
    )


def _sampled_until_decided(mla, cfg, measured: speculative_run.Measured, target, drafts) -> tuple:
    """The ground-kept gate's interval, in looks (mlagate.harness.timing.sequential): after the
    first `samples` runs at every context, LOOK_STEP more at the shortest and the longest
    context a look, up to `max_samples`, while it straddles the bound and the case is within
    `budget_s`. A look whose runs break the path proof or token identity ends the looking (the
    caller judges them). Returns (retained, lo, hi, level, shortest context, longest context)
    and records metrics.sequential."""
    gates, profile = mla.gates, mla.ctx.profile_name
    self_rows = [row for row in measured.rows if row["draft"] == "self"]
    if len(self_rows) < 2:
        raise Invalid(
            "the ground-kept gate needs two context lengths or more; this case has "
            f"{len(self_rows)}"
        )
    lo_p, hi_p = self_rows[0]["context"], self_rows[-1]["context"]
    bound = gates["min_ratio_retained"][mla.case.backend]
    state = {"taken": cfg.samples, "retained": None}

    def take(n: int) -> None:
        if n > state["taken"]:
            for P in (lo_p, hi_p):
                speculative_run.more_samples(
                    mla, cfg, target, drafts, measured, P, n - state["taken"]
                )
            state["taken"] = n

    def judge(level: float):
        lo_t, hi_t = measured.self_times[lo_p], measured.self_times[hi_p]
        retained = stats.retained_ci(
            lo_t["plain"], lo_t["spec"], hi_t["plain"], hi_t["spec"], level
        )
        state["retained"] = (*retained, level)
        broken = measured.unproven or any(
            speculative_run.decisive(m, _tie_margin(mla)) for m in measured.mismatches
        )
        return "decided" if broken or retained[2] < bound or retained[1] >= bound else None

    _, record = sequential(
        cfg.samples,
        gates["max_samples"][profile],
        gates["confidence"],
        gates["budget_s"][profile],
        mla._elapsed,
        take,
        judge,
    )
    mla.metric("sequential", record)
    return (*state["retained"], lo_p, hi_p)


def _tie_margin(mla) -> float:
    return mla.gates["tie_margin"][speculative_run.variant_dtype(mla)][mla.case.backend]


def _ground_kept(mla, measured: speculative_run.Measured, retained: tuple, undecidable) -> None:
    """The ground-kept gate: the self draft's spec/plain ratio at the longest context keeps at
    least `min_ratio_retained` of its value at the shortest (an interval below the bound fails,
    one straddling it is inconclusive); an undecidable token identity comes first."""
    rows, paths = measured.rows, measured.paths
    retained, retained_lo, retained_hi, level, lo_p, hi_p = retained
    lo_row = next(r for r in rows if r["draft"] == "self" and r["context"] == lo_p)
    hi_row = next(r for r in rows if r["draft"] == "self" and r["context"] == hi_p)
    bound = mla.gates["min_ratio_retained"][mla.case.backend]
    mla.metric(
        "gate",
        {
            "ratio_retained": retained,
            "interval": (retained_lo, retained_hi),
            "confidence": level,
            "from_context": lo_row["context"],
            "to_context": hi_row["context"],
            "bound": bound,
        },
    )
    if retained_hi < bound:
        raise Failed(
            ["too_slow"],
            f"speculation loses ground with context: spec/plain throughput {lo_row['ratio']:.2f} "
            f"at P={lo_row['context']}, {hi_row['ratio']:.2f} at P={hi_row['context']} "
            f"({retained:.2f} of it retained, interval {retained_lo:.2f}-{retained_hi:.2f}, bound "
            f"{bound}; verify path {paths[str(hi_row['context'])]['verify']})",
            {"ratio_retained": retained, "bound": bound},
        )
    if undecidable:
        raise Invalid(undecidable)
    if retained_lo < bound:
        raise Invalid(
            f"inconclusive: {retained:.2f} of the spec/plain throughput retained from "
            f"P={lo_row['context']} to P={hi_row['context']}, "
            f"interval {retained_lo:.2f}-{retained_hi:.2f} at {level:.1%} straddles the bound "
            f"{bound} after {len(measured.self_times[lo_p]['plain'])} runs a series"
        )
