"""Units in the last place (ULPs): the unit of a dtype at a magnitude, and errors counted in it.

Shared by the worker's comparisons: outputs against a float64 reference (op `compare`) and
token scripts against each other (mlagate.worker.rollback). Imports only the stdlib; MLX comes
in as the `mx` argument.
"""

from __future__ import annotations

import math

# mantissa bits of each dtype a case runs in
BITS = {"float32": 23, "bfloat16": 7, "float16": 10}
HIST_EDGES = [2.0**k for k in range(-4, 21)]  # ULP edges of the error histogram: 1/16 .. 2^20


def ulp(magnitude: float, bits: int) -> float:
    """One unit in the last place of a dtype with `bits` mantissa bits, at `magnitude`."""
    return 2.0 ** (math.floor(math.log2(magnitude)) - bits) if magnitude > 0 else 2.0**-149


def array_ulps(mx, a, b, bits: int) -> float:
    """max |a - b| in ULPs of the dtype at max |b| (b is the reference)."""
    a64, b64 = a.astype(mx.float32), b.astype(mx.float32)
    if not b64.size:
        return 0.0
    magnitude = mx.max(mx.abs(b64)).item()
    return mx.max(mx.abs(a64 - b64)).item() / ulp(magnitude, bits)


def err_stats(mx, err) -> dict:
    """max, p99 and mean of the elementwise errors, and their histogram: counts[0] below
    edges[0], counts[i] in [edges[i-1], edges[i]), counts[-1] at or above edges[-1]."""
    flat = mx.sort(err.reshape(-1))
    n = flat.size
    below = [int(mx.sum(flat < e).item()) for e in HIST_EDGES] + [n]
    counts = [below[0]] + [below[i] - below[i - 1] for i in range(1, len(below))]
    return {
        "max": flat[-1].item(),
        "p99": flat[min(n - 1, int(0.99 * n))].item(),
        "mean": mx.mean(flat).item(),
        "hist": {"edges": HIST_EDGES, "counts": counts},
    }
