"""The absorbed/materialised crossover of MLA, in exact integer arithmetic.

Per head, with r = kv_lora_rank, d = qk_nope_head_dim + v_head_dim and T the cache length
after the step's update (the latent the attention reads, new tokens included):

    absorbed     costs  L*r*d + 2*L*T*r
    materialised costs  T*r*d + L*T*d

so the absorbed path is cheaper exactly while  L * (r*d + (2r - d)*T) < r*d*T.
Nothing here uses floats, so a boundary is never a rounding accident.
"""

from __future__ import annotations

from fractions import Fraction


def absorbed_wins(L: int, T: int, r: int, n: int, v: int) -> bool:
    """True when the absorbed path is strictly cheaper for L queries against T cached latents.

    When 2r <= d the absorbed path always wins (the materialised path cannot catch up).
    """
    d = n + v
    if 2 * r <= d:
        return True
    return L * (r * d + (2 * r - d) * T) < r * d * T


def max_absorbed_queries(r: int, n: int, v: int, T: int | None = None) -> int:
    """The largest L for which absorbed_wins holds (0 when none does).

    T is the cache length *after* the update, as in absorbed_wins; T=None gives the
    T -> infinity limit, the largest L with L*(2r - d) < r*d.
    """
    d = n + v
    if 2 * r <= d:
        raise ValueError("2r <= n + v: the absorbed path wins at every width")
    if T is None:
        num, den = r * d, 2 * r - d
    else:
        num, den = r * d * T, r * d + (2 * r - d) * T
    return (num - 1) // den


def limit(r: int, n: int, v: int) -> Fraction:
    """r*d / (2r - d) exactly: the crossover width as T -> infinity (never reached at finite T)."""
    d = n + v
    return Fraction(r * d, 2 * r - d)


def table_threshold(r: int, n: int, v: int) -> int:
    """floor(limit): the published crossover per head geometry (170, 398, 512; docs/correctness.md).

    When the limit is itself an integer (512/256/256 gives exactly 512) the largest width
    admitted at any finite T is one less (511): the limit is a supremum, not a maximum.
    """
    return int(limit(r, n, v))


def expected_path(L: int, T_before: int, r: int, n: int, v: int) -> str:
    """The path a correct cache-aware module takes for L new queries on a cache of T_before.

    L == 1 stays absorbed whatever the cache (decode must not change).
    """
    if L == 1:
        return "absorbed"
    return "absorbed" if absorbed_wins(L, T_before + L, r, n, v) else "materialised"


def widest_absorbed(T_before: int, r: int, n: int, v: int) -> int:
    """The largest step width L that expected_path sends to the absorbed path on a cache of
    T_before.

    Always >= 1 (decode). The condition is monotone in L, so a bisection over
    [1, table_threshold + 1] finds it exactly.
    """
    lo, hi = 1, table_threshold(r, n, v) + 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if expected_path(mid, T_before, r, n, v) == "absorbed":
            lo = mid
        else:
            hi = mid - 1
    return lo


def is_tie(L: int, T_before: int, r: int, n: int, v: int) -> bool:
    """True when both paths cost exactly the same for this step (either choice is as fast)."""
    d, T = n + v, T_before + L
    return L * (r * d + (2 * r - d) * T) == r * d * T


def tie_caches(r: int, n: int, v: int, up_to: int) -> list[int]:
    """Cache lengths T_before <= up_to at which the step just past the boundary is an exact tie."""
    return [T for T in range(1, up_to + 1) if is_tie(widest_absorbed(T, r, n, v) + 1, T, r, n, v)]
