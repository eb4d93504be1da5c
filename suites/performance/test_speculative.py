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
and plain decoding's top-two margin there are recorded), and the verify step's cost must not
grow with context by more than `max_verify_growth` decode steps: with the verify step (one
target step of num_draft + 1 tokens) and the decode step (one of 1 token) interleaved on the
same primed cache, the verify growth is (verify at the longest context - verify at the
shortest) / decode at the longest. That is the cost the fix changes: a verify step that
absorbs adds, per token of context, at most what its num_draft + 1 queries add to a decode
step each (so its growth stays below num_draft + 1); one that re-expands the whole cache
grows far beyond (docs/speculative.md, "The verify-growth gate").
Throughput and acceptance are the reported table (metrics.rows; metrics.gate.ratio_retained:
the self draft's spec/plain throughput kept from the shortest to the longest context).

The verify-growth gate is sequential: while its interval straddles the bound, the verify and
decode steps take 6 more timed runs at the shortest and the longest context, up to
`max_samples` a series, within `budget_s`; every look at look_confidence(confidence, looks),
so stopping at the first decided look keeps the stated confidence (metrics.sequential: the
budget, the runs used, the looks, why it stopped).

The run's mechanics (settings, checkpoints, the timed runs and their path proof) are in
mlagate.harness.speculative_run; this file holds the gates, the two judgments and the figures.
"""

import pytest

from mlagate import stats
from mlagate.contract.gates import UNCALIBRATED
from mlagate.harness import Failed, Invalid, speculative_run
from mlagate.harness.timing import sequential, step_growth_ci, stopped_by
from mlagate.worker.speculation import TOP

pytestmark = pytest.mark.mla_checkpoints


def test_speculative(mla):
    _calibrated(mla)
    cfg = speculative_run.Settings.of(mla)
    target, drafts, made = speculative_run.models(mla)
    mla.metric("checkpoints", made)
    mla.metric("settings", cfg.metric())
    measured = speculative_run.measure(mla, cfg, target, drafts)
    mla.metric("paths", measured.paths)
    _token_identity(mla, measured.mismatches)
    if measured.unproven:
        raise Invalid(measured.unproven[0])
    growth = _sampled_until_decided(mla, cfg, measured, target, drafts)
    undecidable = _token_identity(mla, measured.mismatches)
    if measured.unproven:
        raise Invalid(measured.unproven[0])
    _verify_growth(mla, measured, growth, undecidable)


def _calibrated(mla) -> None:
    """A runner whose verify-growth bound was never measured gives no verdict: it is told how to
    measure it (mlagate calibrate) before anything runs."""
    if mla.gates["max_verify_growth"][mla.case.backend] == UNCALIBRATED:
        raise Invalid(
            f"uncalibrated: suites.speculative.gates.max_verify_growth has no measured bound for "
            f"backend {mla.case.backend}: run mlagate calibrate first (mlagate run --suite "
            f"speculative on this runner, then mlagate calibrate --runner {mla.case.runner} OUT "
            "--store STORE for this machine class's runs with --reuse STORE)"
        )


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
    """The verify-growth gate's interval, in looks (mlagate.harness.timing.sequential): after the
    first `samples` runs at every context, LOOK_STEP more of the verify and decode steps at the
    shortest and the longest context a look, up to `max_samples`, while it straddles the bound
    and the case is within `budget_s`. A look whose runs break the path proof ends the looking
    (the caller judges it). Returns (growth, lo, hi, level, shortest context, longest context)
    and records metrics.sequential."""
    gates, profile = mla.gates, mla.ctx.profile_name
    contexts = sorted(measured.step_times)
    if len(contexts) < 2:
        raise Invalid(
            "the verify-growth gate needs two context lengths or more; this case has "
            f"{len(contexts)}"
        )
    lo_p, hi_p = contexts[0], contexts[-1]
    bound = gates["max_verify_growth"][mla.case.backend]
    state = {"taken": cfg.samples, "growth": None}

    def take(n: int) -> None:
        if n > state["taken"]:
            for P in (lo_p, hi_p):
                speculative_run.more_samples(
                    mla, cfg, target, drafts, measured, P, n - state["taken"]
                )
            state["taken"] = n

    def judge(level: float):
        growth = step_growth_ci(measured.step_times[lo_p], measured.step_times[hi_p], level)
        state["growth"] = (*growth, level)
        decided = growth[1] > bound or growth[2] <= bound
        return "decided" if measured.unproven or decided else None

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
    return (*state["growth"], lo_p, hi_p)


def _tie_margin(mla) -> float:
    return mla.gates["tie_margin"][speculative_run.variant_dtype(mla)][mla.case.backend]


def _retained(measured: speculative_run.Measured, lo_p: int, hi_p: int) -> float | None:
    """The self draft's spec/plain throughput at hi_p as a share of its value at lo_p (reported,
    not gated)."""
    lo_t, hi_t = measured.self_times.get(lo_p), measured.self_times.get(hi_p)
    if not lo_t or not hi_t:
        return None

    def ratio(t: dict) -> float:
        return stats.median([p / s for p, s in zip(t["plain"], t["spec"], strict=True)])

    return ratio(hi_t) / ratio(lo_t)


def _verify_growth(mla, measured: speculative_run.Measured, growth: tuple, undecidable) -> None:
    """The verify-growth gate: the verify step's growth from the shortest to the longest context,
    in decode steps at the longest, is at most `max_verify_growth` (an interval above the bound
    fails, one straddling it is inconclusive); an undecidable token identity comes first."""
    growth, growth_lo, growth_hi, level, lo_p, hi_p = growth
    bound = mla.gates["max_verify_growth"][mla.case.backend]
    lo_t, hi_t = measured.step_times[lo_p], measured.step_times[hi_p]
    steps = {
        f"{label}_ms": [1e3 * stats.median(t[label]) for t in (lo_t, hi_t)]
        for label in speculative_run.STEPS
    }
    mla.metric(
        "gate",
        {
            "verify_growth": growth,
            "interval": (growth_lo, growth_hi),
            "confidence": level,
            "from_context": lo_p,
            "to_context": hi_p,
            "bound": bound,
            **steps,
            "ratio_retained": _retained(measured, lo_p, hi_p),
        },
    )
    where = (
        f"verify {steps['verify_ms'][0]:.3g} -> {steps['verify_ms'][1]:.3g} ms, decode "
        f"{steps['decode_ms'][0]:.3g} -> {steps['decode_ms'][1]:.3g} ms from P={lo_p} to "
        f"P={hi_p}: the verify step grew by {growth:.2f} decode steps, interval {growth_lo:.2f}-"
        f"{growth_hi:.2f} at {level:.1%}"
    )
    if growth_lo > bound:
        raise Failed(
            ["too_slow"],
            f"the verify step's cost grows with context: {where}, "
            f"above the bound {bound} (verify path {measured.paths[str(hi_p)]['verify']})",
            {"verify_growth": growth, "bound": bound},
        )
    if undecidable:
        raise Invalid(undecidable)
    if growth_hi > bound:
        raise Invalid(
            f"inconclusive: {where} straddles the bound {bound} after "
            f"{len(hi_t['verify'])} runs a series, {stopped_by(mla.result.metrics['sequential'])}"
        )
