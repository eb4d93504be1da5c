"""What a branch condition tells about the query width and the cache length, whatever the
language: an interval for each when the condition is true, and one when it is false.

A fact maps a quantity to its interval (lo, hi): `L` the number of queries or new tokens of
the step (at least 1), `T` the cached length (at least 0). `L == 1` is true with L in (1, 1)
and false with L in (2, inf); `S > 1 and tiled` is true with S in (2, inf) and, false, says
nothing (S <= 1 *or* not tiled). The analysis of Python (`ast`) and of Rust (tree-sitter)
builds these from a condition's parts; classify() names what a branch is restricted to.
"""

from __future__ import annotations

import math

WIDTH, CACHE = "L", "T"
LOWEST = {WIDTH: 1, CACHE: 0}
INF = math.inf

Facts = dict  # quantity -> (lo, hi)
Pair = tuple  # (facts when true, facts when false)
NONE: Pair = ({}, {})


def compare(quantity: str, op: str, c: int) -> Pair:
    """The facts of `quantity op c` (op one of == != < <= > >=)."""
    lo = LOWEST[quantity]
    if op in ("==", "!="):
        if c != lo:  # only `L == 1` and `T == 0`: the bottom value, whose negation is a bound
            return NONE
        pair = ({quantity: (c, c)}, {quantity: (c + 1, INF)})
        return pair if op == "==" else (pair[1], pair[0])
    table = {
        "<": ((lo, c - 1), (c, INF)),
        "<=": ((lo, c), (c + 1, INF)),
        ">": ((c + 1, INF), (lo, c)),
        ">=": ((c, INF), (lo, c - 1)),
    }
    if op not in table:
        return NONE
    true, false = table[op]
    return ({quantity: true} if true[0] <= true[1] else {}), (
        {quantity: false} if false[0] <= false[1] else {}
    )


FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}


def compare_sides(ql: str | None, op: str, qr: str | None, cl: int | None, cr: int | None) -> Pair:
    """The facts of `left op right` where one side is a quantity (ql or qr) and the other a
    constant (cr or cl); NONE for anything else."""
    if ql and not qr and cr is not None:
        return compare(ql, op, cr)
    if qr and not ql and cl is not None:
        return compare(qr, FLIP[op], cl)
    return NONE


def _meet(all_facts: list[Facts]) -> Facts:
    """Every fact at once (a conjunction): the intersection of the intervals."""
    out: Facts = {}
    for facts in all_facts:
        for q, (lo, hi) in facts.items():
            old = out.get(q, (-INF, INF))
            out[q] = (max(old[0], lo), min(old[1], hi))
    return out


def _join(all_facts: list[Facts]) -> Facts:
    """One of the facts (a disjunction): only quantities every one bounds, their hull."""
    if not all_facts:
        return {}
    common = set(all_facts[0]).intersection(*all_facts[1:])
    return {q: (min(f[q][0] for f in all_facts), max(f[q][1] for f in all_facts)) for q in common}


def conjunction(pairs: list[Pair]) -> Pair:
    return _meet([p[0] for p in pairs]), _join([p[1] for p in pairs])


def disjunction(pairs: list[Pair]) -> Pair:
    return _join([p[0] for p in pairs]), _meet([p[1] for p in pairs])


def negation(pair: Pair) -> Pair:
    return pair[1], pair[0]


# --- what a branch is restricted to ---------------------------------------------------

SINGLE = "single"  # one query or new token: L in (1, 1)
FIXED = "fixed"  # a constant width: L <= c with c >= 2
FLOOR = "floor"  # a constant cache length bounds the branch (T < c or T >= c, c >= 2)


def restriction(facts: Facts) -> str | None:
    """SINGLE or FIXED from the width, else None."""
    width = facts.get(WIDTH)
    if width is None or width[1] == INF:
        return None
    return SINGLE if width[1] <= 1 else FIXED


def floor(pair: Pair) -> bool:
    """True when the condition compares the cache length with a constant of at least 2."""
    for facts in pair:
        lo, hi = facts.get(CACHE, (0, INF))
        if (hi != INF and hi >= 1) or lo >= 2:
            return True
    return False
