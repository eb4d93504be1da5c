"""The speculative suite's run (suites/performance/test_speculative.py), parent side: its
per-profile settings, its checkpoints (tiny synthetic ones the worker writes, or a real one),
the timed ABBA runs of each context with their path proof, and the rows, paths, observations
and token mismatches they leave. The suite file keeps its gates, its two judgments (token
identity, the verify step's growth with context) and its figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mlagate import checkpoints, crossover, stats
from mlagate.harness.errors import Invalid


def per_profile(mla, name):
    value = mla.gates[name]
    if hasattr(value, "get") and mla.profile.id in value:
        return value[mla.profile.id]
    if hasattr(value, "get"):
        raise Invalid(f"suites.speculative.gates.{name} has no entry for profile {mla.profile.id}")
    return value


def decisive(m: dict, budget: float) -> bool:
    """A divergence plain decoding decided by at least the tie margin (or a run of another
    length)."""
    if m["gap"] is not None:
        return m["gap"] >= budget
    if m["gap_at_least"] is not None:
        return m["gap_at_least"] >= budget
    return True


def token_at(tokens: list, i: int):
    return tokens[i] if i < len(tokens) else None


def variant_dtype(mla) -> str:
    return per_profile(mla, "variant")["dtype"]


def first_divergence(a: list, b: list) -> int:
    """The first index where two token lists differ (the shorter length if one is a prefix)."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def divergence(P: int, label: str, got: list, ref: dict) -> dict:
    """Where a run left plain decoding, and by how much plain decoding preferred its own token
    there: gap = logprob(plain's token) - logprob(the run's token), from plain's top list (a
    token outside it: at least the top list's spread, `gap_at_least`)."""
    at = first_divergence(got, ref["tokens"])
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


def models(mla):
    """(target key, {draft name: key}, description) on synthetic or real weights."""
    variant = per_profile(mla, "variant")
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
        base, perturb={"seed": 7, "scale": per_profile(mla, "perturb_scale")}
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
    if s["label"] in STEPS:
        out = mla.call("spec_verify", L=k + 1 if s["label"] == "verify" else 1)
    else:
        out = mla.call("spec_run", mode=s["mode"], draft=s.get("draft"), N=N, num_draft=k)
        ref = state["reference"] = state["reference"] or out
        if out["tokens"] != ref["tokens"]:
            state["mismatches"].append(divergence(state["P"], s["label"], out["tokens"], ref))
    if timed:
        state["times"][s["label"]].append(out["seconds"])
        state["runs"][s["label"]].append(out)
    return out


STEPS = ("verify", "decode")  # one target step alone: of width num_draft + 1, and of width 1


@dataclass(frozen=True)
class Settings:
    """One case's settings: prompt lengths P, tokens per timed run N, draft tokens per round k,
    timed runs per series and context, untimed runs first."""

    contexts: list[int]
    new_tokens: int
    num_draft: int
    samples: int
    warmup: int

    @classmethod
    def of(cls, mla) -> Settings:
        contexts = per_profile(mla, "contexts")
        N = per_profile(mla, "new_tokens")
        k = mla.gates["num_draft"]
        samples, warmup = per_profile(mla, "samples"), per_profile(mla, "warmup")
        return cls(contexts, N, k, samples, warmup)

    def metric(self) -> dict:
        """metrics["settings"]."""
        return {
            "contexts": list(self.contexts),
            "new_tokens": self.new_tokens,
            "num_draft": self.num_draft,
            "verify_width": self.num_draft + 1,
            "samples": self.samples,
            "warmup": self.warmup,
        }


@dataclass
class Measured:
    """What the contexts left: rows (metrics["rows"]), token mismatches against plain decoding,
    each context's paths, the self draft's and the single steps' timings per context, and why
    the path proof failed (empty when it held at every context run)."""

    rows: list[dict] = field(default_factory=list)
    mismatches: list[dict] = field(default_factory=list)
    paths: dict[str, dict] = field(default_factory=dict)
    self_times: dict[int, dict] = field(default_factory=dict)
    step_times: dict[int, dict] = field(default_factory=dict)
    unproven: list[str] = field(default_factory=list)
    states: dict[int, dict] = field(default_factory=dict)


def measure(mla, cfg: Settings, target, drafts: dict) -> Measured:
    """Every context in turn: the timed runs, their path proof, the context's paths, observations
    and rows (metrics["rows"] rewritten as each context finishes). The first context whose path
    proof fails ends the runs."""
    r, n, v = mla.geometry.rnv
    series = (
        [{"label": "plain", "mode": "plain"}]
        + [{"label": f"spec:{d}", "mode": "spec", "draft": d} for d in drafts]
        + [{"label": label} for label in STEPS]
    )
    m = Measured()
    for P in cfg.contexts:
        state = _time_context(mla, cfg, target, drafts, series, P, m.mismatches)
        runs = state["runs"]
        # path proof: plain decoding absorbs; each series' verify steps take one path, the timed
        # verify step's
        m.unproven = unproven_paths(P, series, runs)
        if m.unproven:
            break  # the timings of this context measured another path: the rows stop here
        verify_path = next(iter({o["target"]["path"] for o in runs["verify"]}))
        m.paths[str(P)] = {
            "plain": "absorbed",
            "decode": "absorbed",
            "verify": verify_path,
            "verify_expected": crossover.expected_path(cfg.num_draft + 1, P - 1, r, n, v),
            "draft": {
                s["label"]: sorted({o["draft"]["path"] for o in runs[s["label"]]})
                for s in series
                if s.get("mode") == "spec"
            },
        }
        mla.result.observations.append(_observation(P, state))
        m.states[P] = state
        _add_rows(m, cfg, series, P, state, verify_path)
        mla.metric("rows", m.rows)  # written as each context finishes: a later crash keeps these
    return m


def _time_context(mla, cfg: Settings, target, drafts: dict, series, P: int, mismatches) -> dict:
    """Primes the prompt's first P - 1 tokens into the target's and each draft's caches, runs
    each series untimed (`warmup` times, at least once), then `samples` timed rounds of all
    series, interleaved ABBA. The state: the timed runs and seconds per series, and the first
    plain output (the reference every output is checked against)."""
    state = {
        "P": P,
        "times": {s["label"]: [] for s in series},
        "runs": {s["label"]: [] for s in series},
        "reference": None,
        "mismatches": mismatches,
    }
    _timed_runs(mla, cfg, target, drafts, series, state, max(1, cfg.warmup), cfg.samples)
    return state


def _timed_runs(mla, cfg: Settings, target, drafts, series, state: dict, warmup: int, n: int):
    """The prompt of state["P"] primed anew, each series run `warmup` times untimed, then n
    timed rounds of all series, interleaved ABBA (into state)."""
    mla.call(
        "spec_prime",
        target=target,
        drafts=drafts,
        P=state["P"],
        seed=1,
        chunk=mla.profile.prefill_chunk,
    )
    k, N = cfg.num_draft, cfg.new_tokens
    for s in series:
        for _ in range(warmup):
            _once(mla, s, k, N, state, timed=False)
    for i in range(n):
        for s in series if i % 2 == 0 else list(reversed(series)):
            _once(mla, s, k, N, state, timed=True)


def more_samples(mla, cfg: Settings, target, drafts: dict, m: Measured, P: int, n: int) -> None:
    """n more timed rounds of the verify step and the decode step at context P, for a later look
    of the verify-growth gate: the prompt primed anew, each run once untimed, then ABBA; their
    paths proved (m.unproven says why not)."""
    series = [{"label": label} for label in STEPS]
    state = m.states[P]
    _timed_runs(mla, cfg, target, drafts, series, state, 1, n)
    m.step_times[P] = {label: state["times"][label] for label in STEPS}
    spec = [{"label": label, "mode": "spec"} for label in state["runs"] if ":" in label]
    m.unproven = unproven_paths(P, [*spec, *series], state["runs"])


def _observation(P: int, state: dict) -> dict:
    """A context's observation: the names the runtime lacked, and each series' timed runs (the
    target's and the draft's counters) with their seconds."""
    times, runs, reference = state["times"], state["runs"], state["reference"]
    return {
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


def _add_rows(m: Measured, cfg: Settings, series, P: int, state: dict, verify_path: str) -> None:
    """One row per speculative series of a context (plain vs spec throughput, their difference's
    interval and verdict, acceptance of the first timed run, the verify and decode steps' times,
    their paired ratio and the verify path), the self draft's timings, and the single steps'
    timings for the verify-growth gate."""
    times, runs, reference = state["times"], state["runs"], state["reference"]
    N, k = cfg.new_tokens, cfg.num_draft
    plain_s = stats.median(times["plain"])
    if "spec:self" in times:
        m.self_times[P] = {"plain": times["plain"], "spec": times["spec:self"]}
    m.step_times[P] = {label: times[label] for label in STEPS}
    per_decode = stats.median(
        [v / d for v, d in zip(times["verify"], times["decode"], strict=True)]
    )
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
        m.rows.append(
            {
                "context": P,
                "draft": s["draft"],
                "plain_tok_s": N / plain_s,
                "spec_tok_s": N / spec_s,
                "ratio": plain_s / spec_s,
                "verify_ms": 1e3 * stats.median(times["verify"]),
                "decode_ms": 1e3 * stats.median(times["decode"]),
                "verify_per_decode": per_decode,
                "draft_tokens": k,
                "acceptance": first["accepted"] / first["drafted"] if first["drafted"] else None,
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


def unproven_paths(P: int, series: list[dict], runs: dict) -> list[str]:
    """Why the path proof of one context does not hold: plain decoding and the decode step must
    absorb, the timed verify step take one path, and every speculative series' verify steps that
    same path."""
    for label, what in (("plain", "plain decoding"), ("decode", "the decode step")):
        seen = {o["target"]["path"] for o in runs.get(label, [])}
        if seen - {"absorbed"}:
            return [f"P={P}: {what} ran {sorted(seen)}, not absorbed (L = 1)"]
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
