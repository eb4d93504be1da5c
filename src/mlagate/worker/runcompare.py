"""Two token scripts compared inside the worker (mlagate.worker.rollback runs them): logits at
every position still in the cache, each sparse indexer's selections, and the caches' public
state, in ULPs of the dtype; only the verdict evidence crosses the pipe. Imports only the stdlib
here; MLX arrives through the worker."""

from __future__ import annotations

from mlagate.worker.ulps import BITS, array_ulps, ulp

PRIVATE_POOL = "_pool"  # mlx-vlm 0.6.17's private pool field: evidence only


def compare_runs(mx, tested, ref, dtype: str, margin_ulps: float) -> dict:
    """Tested against reference (two rollback.ScriptRun): positions, logits (ULPs), argmax where
    the margin is clear, selections (exact), and every mark's cache offsets (exact) and state
    arrays (ULPs)."""
    bits = BITS[dtype]
    out: dict = {
        "positions": {"tested": len(tested.logits), "reference": len(ref.logits)},
        "errors": {"tested": tested.error, "reference": ref.error},
    }
    only_t = sorted(set(tested.logits) - set(ref.logits))
    only_r = sorted(set(ref.logits) - set(tested.logits))
    out["positions"].update({"only_tested": only_t[:8], "only_reference": only_r[:8]})
    common = sorted(set(tested.logits) & set(ref.logits))
    per_pos, argmax = [], []
    if common:
        R = mx.stack([ref.logits[p] for p in common])
        T = mx.stack([tested.logits[p] for p in common])
        unit = ulp(mx.max(mx.abs(R)).item(), bits)
        err = (mx.max(mx.abs(T - R), axis=-1) / unit).tolist()
        top2 = mx.topk(R, 2, axis=-1)
        margins = ((mx.max(top2, axis=-1) - mx.min(top2, axis=-1)) / unit).tolist()
        ra, ta = mx.argmax(R, axis=-1).tolist(), mx.argmax(T, axis=-1).tolist()
        for p, e, m, a, b in zip(common, err, margins, ra, ta, strict=True):
            per_pos.append({"position": p, "ulps": e})
            if a != b and m > margin_ulps:
                argmax.append({"position": p, "reference": a, "tested": b, "margin_ulps": m})
        out["logits"] = {
            "unit": unit,
            "max_ulps": max(err),
            "worst_position": common[err.index(max(err))],
            "per_position": per_pos,
        }
    out["argmax_disagreements"] = argmax
    mism, same, dense = [], 0, 0
    for key in sorted(set(tested.topk) & set(ref.topk), key=lambda k: (k[1], k[0])):
        a, b = tested.topk[key], ref.topk[key]
        if a == b:
            same += 1
            dense += a == "dense"
        else:
            mism.append({"indexer": key[0], "position": key[1], "tested": a, "reference": b})
    for key in sorted(
        set(tested.topk) ^ set(ref.topk), key=lambda k: (k[1], k[0])
    ):  # a selection one side made and the other did not
        mism.append(
            {
                "indexer": key[0],
                "position": key[1],
                "tested": tested.topk.get(key, "absent"),
                "reference": ref.topk.get(key, "absent"),
            }
        )
    out["topk"] = {
        "compared": same + len(mism),
        "equal": same,
        "dense": dense,
        "mismatches": mism[:4],
        "mismatch_count": len(mism),
    }
    marks = {}
    for label in sorted(set(tested.marks) & set(ref.marks)):
        marks[label] = _compare_snapshots(mx, tested.marks[label], ref.marks[label], bits)
    out["marks"] = marks
    return out


def _compare_snapshots(mx, tested: list[dict], ref: list[dict], bits: int) -> dict:
    problems, private, worst = [], [], {}
    if len(tested) != len(ref):
        problems.append(f"{len(tested)} leaf caches vs {len(ref)}")
    for i, (t, r) in enumerate(zip(tested, ref, strict=False)):
        where = f"cache[{i}] {r['type']}"
        if t["offset"] != r["offset"]:
            problems.append(
                f"{where}: offset {t['offset']} vs {r['offset']} in the run that never saw the "
                "rejected tokens"
            )
        for (name, a), (_, b) in zip(t["arrays"], r["arrays"], strict=False):
            problems.extend(_compare_array(mx, f"{where} {name}", a, b, bits, worst))
        if len(t["arrays"]) != len(r["arrays"]):
            problems.append(f"{where}: {len(t['arrays'])} state arrays vs {len(r['arrays'])}")
        if t.get("private") or r.get("private"):
            if t.get("private_length") != r.get("private_length"):
                private.append(
                    f"{where} private {PRIVATE_POOL} remembers length {t.get('private_length')} "
                    f"vs {r.get('private_length')} (the cache's public offset is {t['offset']})"
                )
            for (name, a), (_, b) in zip(t.get("private", []), r.get("private", []), strict=False):
                private.extend(_compare_array(mx, f"{where} {name}", a, b, bits, worst))
    return {"problems": problems, "private": private, "max_ulps": worst}


def _compare_array(mx, where: str, a, b, bits: int, worst: dict) -> list[str]:
    if tuple(a.shape) != tuple(b.shape):
        return [f"{where}: shape {tuple(a.shape)} vs {tuple(b.shape)}"]
    if a.size == 0:
        return []
    if mx.issubdtype(b.dtype, mx.floating):
        worst[where] = array_ulps(mx, a, b, bits)
        return []
    if not mx.array_equal(a, b).item():
        return [f"{where}: integer/bool state differs"]
    return []
