"""Where a module's path choice is wrong, said as a region rather than its first step: the
widths and cache lengths on which it took the other path, and whether the wrong region lies
below a cache length (a floor: "materialised at L = 2..8 for every warm T < 1024, absorbed
from T = 1024"), above one (a ceiling), on every warm cache, or on cold caches.

A step is (T, L, taken, expected): T the cache before the step (0: cold), L its width.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mlagate import crossover

Step = tuple[int, int, str, str]  # T, L, taken, expected


def span(values: Iterable[int]) -> str:
    """2..8 for a run of consecutive integers, else 2, 4, 8."""
    v = sorted(set(values))
    if len(v) > 2 and v[-1] - v[0] == len(v) - 1:
        return f"{v[0]}..{v[-1]}"
    return ", ".join(map(str, v))


def first_absorbed(L: int, r: int, n: int, v: int, upto: int = 1 << 20) -> int | None:
    """The smallest warm cache T >= 1 on which the formula absorbs a step of width L."""
    lo, hi = 1, upto
    if crossover.expected_path(L, hi, r, n, v) != "absorbed":
        return None
    while lo < hi:  # absorbed is monotone in T for a fixed width
        mid = (lo + hi) // 2
        if crossover.expected_path(L, mid, r, n, v) == "absorbed":
            hi = mid
        else:
            lo = mid + 1
    return lo


def _warm(steps: Sequence[Step], rnv: tuple[int, int, int]) -> str:
    """The wrong region among warm steps of width >= 2 whose formula path is absorbed."""
    warm = [s for s in steps if s[0] > 0 and s[1] >= 2 and s[3] == "absorbed"]
    wrong = [s for s in warm if s[2] != s[3]]
    if not wrong:
        return ""
    caches = sorted({s[0] for s in warm})
    bad = sorted({s[0] for s in wrong})
    good = [t for t in caches if t not in bad]
    taken = "/".join(sorted({s[2] for s in wrong}))
    what = f"{taken} at L = {span(s[1] for s in wrong)}"
    since = first_absorbed(max(s[1] for s in wrong), *rnv)
    formula = f"the formula says absorbed from T = {since}" if since else ""
    if good and max(bad) < min(good):
        return (
            f"{what} for every warm T < {min(good)} (T = {span(bad)}), absorbed from "
            f"T = {min(good)}: a cache-length floor; {formula}"
        )
    if good and min(bad) > max(good):
        return (
            f"{what} for every warm T > {max(good)} (T = {span(bad)}), absorbed up to "
            f"T = {max(good)}: a cache-length ceiling; {formula}"
        )
    where = f"on every warm cache (T = {span(bad)})" if not good else f"on warm T = {span(bad)}"
    rest = f", absorbed on T = {span(good)}" if good else ""
    return f"{what} {where}{rest}; {formula}"


def describe(steps: Sequence[Step], rnv: tuple[int, int, int]) -> str:
    """The wrong regions of a sweep ('' when every step took the formula's path)."""
    parts = [_warm(steps, rnv)]
    decode = [s for s in steps if s[1] == 1 and s[2] != s[3]]
    if decode:
        parts.append(f"{decode[0][2]} at L = 1 on T = {span(s[0] for s in decode)}")
    cold = [s for s in steps if s[0] == 0 and s[1] >= 2 and s[2] != s[3]]
    if cold:
        taken = "/".join(sorted({s[2] for s in cold}))
        parts.append(
            f"{taken} on a cold cache at L = {span(s[1] for s in cold)}, the formula says "
            "materialised"
        )
    other = [s for s in steps if s[0] > 0 and s[1] >= 2 and s[3] != "absorbed" and s[2] != s[3]]
    if other:
        parts.append(f"{other[0][2]} at L = {span(s[1] for s in other)} where the formula says "
                     f"{other[0][3]}")  # fmt: skip
    return "; ".join(p for p in parts if p)
