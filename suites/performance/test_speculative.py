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
"""

import dataclasses

import pytest

from mlagate import checkpoints, crossover, gates, results, stats, suites
from mlagate.harness import Invalid
from mlagate.report import plots
from mlagate.worker.speculation import TOP

_VARIANT = gates.Record({"dtype": gates.Dtype(), "quant": gates.Quant()})
GATES = {
    "contexts": gates.Keyed(
        "profile", gates.List(gates.Int(1, 1 << 20), min_len=2)
    ),  # prompt lengths P
    "new_tokens": gates.Keyed("profile", gates.Int(1, 4096)),  # tokens generated per timed run
    "num_draft": gates.Int(1, 64),  # draft tokens per round
    "samples": gates.Keyed("profile", gates.Samples()),  # timed runs per series and context
    "warmup": gates.Keyed("profile", gates.Int(0, 100)),  # untimed runs of each series first
    "layers": gates.Int(1, 64),  # decoder layers of the tiny checkpoints
    "perturb_scale": gates.Keyed(
        "profile", gates.Number(0, above=True)
    ),  # the perturbed draft: noise as a share of each tensor's std
    "variant": gates.Keyed("profile", _VARIANT),  # the checkpoints' weights per profile
    "min_ratio_retained": gates.Number(
        0, 1, above=True
    ),  # share of the spec/plain ratio kept from shortest to longest prompt
    "tie_margin": gates.Keyed(
        "dtype", gates.Keyed("backend", gates.Number(0, above=True))
    ),  # log-prob gap below which a divergence is a near-tie
}
# a single-query guard makes every verify step re-expand the cache: speculation loses ground
CONTROLS_FAIL = True

pytestmark = pytest.mark.mla_checkpoints


def _per_profile(mla, name):
    value = mla.gates[name]
    if hasattr(value, "get") and mla.profile.id in value:
        return value[mla.profile.id]
    if hasattr(value, "get"):
        raise Invalid(f"suites.speculative.gates.{name} has no entry for profile {mla.profile.id}")
    return value


def _decisive(m: dict, budget: float) -> bool:
    """A divergence plain decoding decided by at least the tie margin (or a run of another
    length)."""
    if m["gap"] is not None:
        return m["gap"] >= budget
    if m["gap_at_least"] is not None:
        return m["gap_at_least"] >= budget
    return True


def _at(tokens: list, i: int):
    return tokens[i] if i < len(tokens) else None


def _per_variant_dtype(mla) -> str:
    return _per_profile(mla, "variant")["dtype"]


def _first_divergence(a: list, b: list) -> int:
    """The first index where two token lists differ (the shorter length if one is a prefix)."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _divergence(P: int, label: str, got: list, ref: dict) -> dict:
    """Where a run left plain decoding, and by how much plain decoding preferred its own token
    there: gap = logprob(plain's token) - logprob(the run's token), from plain's top list (a
    token outside it: at least the top list's spread, `gap_at_least`)."""
    at = _first_divergence(got, ref["tokens"])
    record = {
        "context": P,
        "series": label,
        "at": at,
        "got": got,
        "plain": ref["tokens"],
        "gap": None,
        "gap_at_least": None,
    }
    if at < min(len(got), len(ref["top"])):
        top = dict((int(t), lp) for t, lp in ref["top"][at])
        best = ref["top"][at][0][1]
        if got[at] in top:
            record["gap"] = best - top[got[at]]
        else:
            record["gap_at_least"] = best - ref["top"][at][-1][1]
    return record


def _load(mla, key, path, share=None):
    info = mla.call("load_checkpoint", key=key, path=str(path), share=share)
    mla.result.observations.append({"loaded": info})
    return key


def _models(mla):
    """(target key, {draft name: key}, description) on synthetic or real weights."""
    variant = _per_profile(mla, "variant")
    quant = (
        None
        if variant["quant"] == "none"
        else {
            "group_size": int(variant["quant"]["group_size"]),
            "bits": int(variant["quant"]["bits"]),
        }
    )
    if mla.case.evidence == "checkpoint":
        path = checkpoints.real(mla.checkpoint_path)
        target = _load(mla, "target", path)
        return (
            target,
            {"self": _load(mla, "draft-self", path, share=target)},
            {"checkpoint": str(path)},
        )
    fp = mla.ctx.pool.get(mla.case.arm).fingerprint
    base = checkpoints.Synthetic(
        runtime=f"{mla.module.runtime} {fp.get('arm_version')}",
        import_path=mla.module.import_path,
        model=mla.module.model,
        args=mla.module.args,
        config=checkpoints.tiny_config(mla.config(), mla.gates["layers"]),
        seed=0,
        dtype=variant["dtype"],
        quant=quant,
    )
    perturbed = dataclasses.replace(
        base, perturb={"seed": 7, "scale": _per_profile(mla, "perturb_scale")}
    )
    root = mla.ctx.cache
    folders = {}
    for name, spec in (("target", base), ("perturbed", perturbed)):
        written = mla.call("write_checkpoint", **spec.request(root))
        folders[name] = written["path"]
    target = _load(mla, "target", folders["target"])
    drafts = {
        "self": _load(mla, "draft-self", folders["target"], share=target),
        "perturbed": _load(mla, "draft-perturbed", folders["perturbed"]),
    }
    return (
        target,
        drafts,
        {
            "target": folders["target"],
            "perturbed": folders["perturbed"],
            "dtype": variant["dtype"],
            "quant": quant,
            "layers": mla.gates["layers"],
        },
    )


def _once(mla, s: dict, k: int, N: int, state: dict, timed: bool) -> dict:
    """One run of a series on the primed prompt; every generated sequence is checked against
    the first plain one (a difference is recorded as a mismatch)."""
    if s["label"] == "verify":
        out = mla.call("spec_verify", L=k + 1)
    else:
        out = mla.call("spec_run", mode=s["mode"], draft=s.get("draft"), N=N, num_draft=k)
        ref = state["reference"] = state["reference"] or out
        if out["tokens"] != ref["tokens"]:
            state["mismatches"].append(_divergence(state["P"], s["label"], out["tokens"], ref))
    if timed:
        state["times"][s["label"]].append(out["seconds"])
        state["runs"][s["label"]].append(out)
    return out


def test_speculative(mla):
    gates = mla.gates
    contexts = _per_profile(mla, "contexts")
    N = _per_profile(mla, "new_tokens")
    k = gates["num_draft"]
    samples, warmup = _per_profile(mla, "samples"), _per_profile(mla, "warmup")
    target, drafts, made = _models(mla)
    mla.metric("checkpoints", made)
    mla.metric(
        "settings",
        {
            "contexts": list(contexts),
            "new_tokens": N,
            "num_draft": k,
            "verify_width": k + 1,
            "samples": samples,
            "warmup": warmup,
        },
    )
    r, n, v = mla.geometry.rnv
    series = (
        [{"label": "plain", "mode": "plain"}]
        + [{"label": f"spec:{d}", "mode": "spec", "draft": d} for d in drafts]
        + [{"label": "verify"}]
    )
    rows, mismatches, paths, self_times, unproven = [], [], {}, {}, []

    for P in contexts:
        mla.call(
            "spec_prime", target=target, drafts=drafts, P=P, seed=1, chunk=mla.profile.prefill_chunk
        )
        state = {
            "P": P,
            "times": {s["label"]: [] for s in series},
            "runs": {s["label"]: [] for s in series},
            "reference": None,
            "mismatches": mismatches,
        }
        for s in series:
            for _ in range(max(1, warmup)):
                _once(mla, s, k, N, state, timed=False)
        for i in range(samples):
            for s in series if i % 2 == 0 else list(reversed(series)):
                _once(mla, s, k, N, state, timed=True)
        times, runs, reference = state["times"], state["runs"], state["reference"]

        # path proof: plain decoding absorbs; each series' verify steps take one path, the timed
        # verify step's
        unproven = _unproven_paths(P, series, runs)
        if unproven:
            break  # the timings of this context measured another path: the rows stop here
        verify_path = next(iter({o["target"]["path"] for o in runs["verify"]}))
        paths[str(P)] = {
            "plain": "absorbed",
            "verify": verify_path,
            "verify_expected": crossover.expected_path(k + 1, P - 1, r, n, v),
            "draft": {
                s["label"]: sorted({o["draft"]["path"] for o in runs[s["label"]]})
                for s in series
                if s.get("mode") == "spec"
            },
        }

        mla.result.observations.append(
            {
                "context": P,
                "absent": reference.get("absent", []),
                "timed": {
                    label: {
                        "target": [o["target"] for o in outs],
                        "draft": [o["draft"] for o in outs if "draft" in o],
                        "seconds": times[label],
                    }
                    for label, outs in runs.items()
                },
            }
        )

        plain_s = stats.median(times["plain"])
        if "spec:self" in times:
            self_times[P] = {"plain": times["plain"], "spec": times["spec:self"]}
        margins = reference["margins"]
        for s in series:
            if s.get("mode") != "spec":
                continue
            spec_s = stats.median(times[s["label"]])
            d, lo, hi = stats.diff_ci(times["plain"], times[s["label"]])
            verdict = (
                "speculation wins" if hi < 0 else "speculation loses" if lo > 0 else "inconclusive"
            )
            first = runs[s["label"]][0]
            rows.append(
                {
                    "context": P,
                    "draft": s["draft"],
                    "plain_tok_s": N / plain_s,
                    "spec_tok_s": N / spec_s,
                    "ratio": plain_s / spec_s,
                    "verify_ms": 1e3 * stats.median(times["verify"]),
                    "draft_tokens": k,
                    "acceptance": first["accepted"] / first["drafted"]
                    if first["drafted"]
                    else None,
                    "verdict": verdict,
                    "spec_minus_plain_s": d,
                    "ci_s": (lo, hi),
                    "drafted": first["drafted"],
                    "accepted": first["accepted"],
                    "rounds": first["rounds"],
                    "verify_path": verify_path,
                    "new_tokens": N,
                    "plain_min_margin": min(margins) if margins else None,
                }
            )
        mla.metric("rows", rows)  # written as each context finishes: a later crash keeps these

    mla.metric("paths", paths)
    variant_dtype = _per_variant_dtype(mla)
    budget = gates["tie_margin"][variant_dtype][mla.case.backend]
    decisive = [m for m in mismatches if _decisive(m, budget)]
    mla.metric(
        "token_identity",
        {
            "mismatches": mismatches[:5],
            "count": len(mismatches),
            "decisive": len(decisive),
            "tie_margin": budget,
        },
    )
    if mismatches:
        m = (decisive or mismatches)[0]
        where = (
            f"first at P={m['context']} ({m['series']}), token {m['at']}: "
            f"{_at(m['got'], m['at'])} vs plain's {_at(m['plain'], m['at'])}"
        )
        gap = (
            f"plain preferred its token by {m['gap']:.3g} in log-prob"
            if m["gap"] is not None
            else f"plain ranked the run's token outside its top {TOP} (gap at least "
            f"{m['gap_at_least']})"
        )
        if decisive:
            raise AssertionError(
                f"greedy speculative output differs from plain decoding in {len(mismatches)} "
                f"run(s): {where}; {gap}, above the tie margin {budget}"
            )
        undecidable = (
            f"undecidable: greedy outputs diverged only at near-ties ({len(mismatches)} "
            f"run(s), {where}; {gap}, below the {variant_dtype} tie margin {budget}): the "
            "arithmetic, not the runtime, may have chosen"
        )
    else:
        undecidable = None
    if unproven:
        raise Invalid(unproven[0])
    self_rows = [row for row in rows if row["draft"] == "self"]
    if len(self_rows) < 2:
        raise Invalid(
            "the ground-kept gate needs two context lengths or more; this case has "
            f"{len(self_rows)}"
        )
    lo_row, hi_row = self_rows[0], self_rows[-1]
    lo_t, hi_t = self_times[lo_row["context"]], self_times[hi_row["context"]]
    retained, retained_lo, retained_hi = stats.retained_ci(
        lo_t["plain"], lo_t["spec"], hi_t["plain"], hi_t["spec"]
    )
    bound = gates["min_ratio_retained"]
    mla.metric(
        "gate",
        {
            "ratio_retained": retained,
            "interval": (retained_lo, retained_hi),
            "from_context": lo_row["context"],
            "to_context": hi_row["context"],
            "bound": bound,
        },
    )
    if retained_hi < bound:
        raise AssertionError(
            f"speculation loses ground with context: spec/plain throughput {lo_row['ratio']:.2f} "
            f"at P={lo_row['context']}, {hi_row['ratio']:.2f} at P={hi_row['context']} "
            f"({retained:.2f} of it retained, interval {retained_lo:.2f}-{retained_hi:.2f}, bound "
            f"{bound}; verify path {paths[str(hi_row['context'])]['verify']})"
        )
    if undecidable:
        raise Invalid(undecidable)
    if retained_lo < bound:
        raise Invalid(
            f"inconclusive: {retained:.2f} of the spec/plain throughput retained from "
            f"P={lo_row['context']} to P={hi_row['context']}, "
            f"interval {retained_lo:.2f}-{retained_hi:.2f} straddles the bound {bound}"
        )


def _unproven_paths(P: int, series: list[dict], runs: dict) -> list[str]:
    """Why the path proof of one context does not hold: plain decoding must absorb, the timed
    verify step take one path, and every speculative series' verify steps that same path."""
    plain_paths = {o["target"]["path"] for o in runs["plain"]}
    if plain_paths != {"absorbed"}:
        return [f"P={P}: plain decoding ran {sorted(plain_paths)}, not absorbed (L = 1)"]
    verify_paths = {o["target"]["path"] for o in runs["verify"]}
    if len(verify_paths) != 1 or verify_paths & {"mixed", "split", "none"}:
        return [f"P={P}: the timed verify step ran {sorted(verify_paths)}"]
    verify_path = next(iter(verify_paths))
    return [
        f"P={P}: {s['label']} verify steps ran {sorted(seen)}, the timed verify step {verify_path}"
        for s in series
        if s.get("mode") == "spec"
        for seen in [{o["target"]["path"] for o in runs[s["label"]]}]
        if seen != {verify_path}
    ][:1]


# --- what the report and the history show ------------------------------------------------


def throughput_rows(metrics: dict) -> list[dict]:
    """Decode throughput rows of a result: metrics["rows"] or metrics["throughput"], each a
    list of {context, plain_tok_s, spec_tok_s[, draft]} (metrics["throughput"] may also be a
    dict keyed by context). Rows without both throughputs' keys are left out; draft defaults
    to "spec"."""
    out = []
    for name in ("rows", "throughput"):
        t = (metrics or {}).get(name)
        if isinstance(t, dict):
            t = [{"context": k, **v} for k, v in t.items() if isinstance(v, dict)]
        if not isinstance(t, list):
            continue
        for row in t:
            if not isinstance(row, dict) or "plain_tok_s" not in row or "spec_tok_s" not in row:
                continue
            try:
                out.append(
                    {
                        "context": float(row["context"]),
                        "plain_tok_s": plots.num(row.get("plain_tok_s")),
                        "spec_tok_s": plots.num(row.get("spec_tok_s")),
                        "draft": str(row.get("draft") or "spec"),
                    }
                )
            except (KeyError, TypeError, ValueError):
                continue
    return sorted(out, key=lambda r: (r["context"], r["draft"]))


def throughput_plots(rows: list[dict]) -> list[plots.Plot]:
    """Plain vs speculative decode throughput against context (one line per draft)."""
    out = []
    for r in sorted(rows, key=lambda r: (r["module"], results.geometry_label(r), r["arm"])):
        tr = throughput_rows(r.get("metrics") or {})
        if not tr:
            continue
        plain = sorted(
            {x["context"]: x["plain_tok_s"] for x in tr if x["plain_tok_s"] is not None}.items()
        )
        series = [plots.Series("plain decode", plain, plots.PALETTE[0])]
        for i, draft in enumerate(sorted({x["draft"] for x in tr})):
            pts = [
                (x["context"], x["spec_tok_s"])
                for x in tr
                if x["draft"] == draft and x["spec_tok_s"] is not None
            ]
            name = f"speculative ({draft})" if draft != "spec" else "speculative decode"
            series.append(plots.Series(name, pts, plots.PALETTE[(i + 2) % len(plots.PALETTE)]))
        geo = results.geometry_label(r)
        title = f"decode throughput: {r['module']} · {geo} · {r['arm']} · {r.get('backend', '')}"
        svg = plots.line_chart(
            title, series, "context (tokens)", "tokens / s", x_log=True, x_base=2
        )
        name = plots.slug("throughput", r["module"], geo, r["arm"], plots.short(r["case_id"]))
        out.append(
            plots.Plot(
                "throughput", name, title, svg, f"verdict {r['verdict']}: {r.get('reason', '')}"
            )
        )
    return out


def speedup(r: dict) -> float | None:
    """spec / plain tok/s at the longest context, of the self draft if there is one."""
    tr = [
        x for x in throughput_rows(r["metrics"]) if x["plain_tok_s"] and x["spec_tok_s"] is not None
    ]
    drafts = {x["draft"] for x in tr}
    tr = [x for x in tr if x["draft"] == ("self" if "self" in drafts else min(drafts, default=""))]
    return tr[-1]["spec_tok_s"] / tr[-1]["plain_tok_s"] if tr else None


ORDER = 40
PLOTS = suites.PlotSection(
    "throughput",
    "Plain vs speculative decode",
    "Tokens per second of plain and speculative decoding against the context length.",
    throughput_plots,
)
KEY_FIGURES = (
    suites.KeyFigure(
        "spec_speedup",
        "speculative / plain tok/s at the longest context (self draft if any)",
        "x",
        speedup,
        higher_is_worse=False,
    ),
)
