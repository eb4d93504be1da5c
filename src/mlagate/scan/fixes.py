"""The change that fixes a scan finding: in words and code, and as a SARIF fix where the edit
is mechanical.

The fix of a single-query guard (MLA001) is the cache-aware decision of the verify-step patch:
absorb when the cost formula says so for this width and cache length, not only for one query.
"""

from __future__ import annotations

import re
from urllib.parse import quote

DIMS = "(self.kv_lora_rank, self.qk_nope_head_dim, self.v_head_dim)"
FORMULA = (
    "use_absorbed(L, (r, n, v), T) is true when 2r <= n + v, "
    "else when L * (r*d + (2r - d)*T) < r*d*T "
    "with d = n + v and T the cached latent length after the update"
)
SIMPLE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.shape\[-?\d\])?) == 1$")
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
WIDTH = re.compile(
    rf"({NAME}(?:\.shape\[-?\d\])?)\s*(?:==|<=|<|>=|>|!=)\s*(?:\d+|{NAME})\b"
    rf"|\b(?:\d+|[A-Z_][A-Z0-9_]*)\s*(?:==|<=|<|>=|>|!=)\s*({NAME})"
)


OVERLAY = (
    "a `modules:` entry cannot import this file: gate it with an `overlay:` arm that copies it "
    "over the runtime module it replaces (`overlay: {on: <the stock arm>, files: "
    "{<package>/models/<name>.py: <this file>}}`, docs/matrix.md#arms); that module, registered "
    "under `modules:`, is then tested as this file"
)


def uri(path: str) -> str:
    """A finding's path as a relative URI reference (SARIF artifactLocation)."""
    return quote(path.replace("\\", "/"), safe="/")


def width_name(guard: str) -> str:
    """The query-width expression a guard tests (L in `L == 1`), else L."""
    m = WIDTH.search(guard)
    return (m.group(1) or m.group(2)) if m else "L"


def cache_aware(guard: str, rust: bool = False) -> str:
    L = width_name(guard)
    if rust:
        return f"{L} == 1 || use_absorbed({L}, {DIMS}, t)"
    return f"{L} == 1 or use_absorbed({L}, {DIMS}, T)"


def _decide(f, width: str = "", guard: str | None = None) -> str:
    rust = f.path.endswith(".rs")
    bind = "let absorbed = " if rust else "absorbed = "
    cached = "t" if rust else "T"
    decision = cache_aware(f.guard if guard is None else guard, rust)
    return (
        f"decide once, after the cache update: `{bind}{decision}{';' if rust else ''}`"
        f" ({cached}: the cached length after the update){width}, and "
        "branch on `absorbed` at the query fold and at the output unfold"
    )


def suggestion(f) -> str:
    if f.rule == "MLA001":
        return _decide(f)
    if f.rule == "MLA007":
        return _decide(f, " instead of a constant width")
    if f.rule == "MLA008":
        return _decide(f, " for every cached length, with no constant floor", guard="")
    if f.rule == "MLA002":
        return (
            "key the indexer's pool reuse on the cache (pool the new tokens of a step of any "
            "width and reuse the cached pool), not on a single new token"
        )
    if f.rule == "MLA003":
        return (
            "bind one decision (`absorbed = ...`) after the cache update and branch on it at "
            "both the query fold and the output unfold"
        )
    if f.rule == "MLA004":
        return (
            "register the module in the matrix (modules:) so that the gate tests it, "
            "or allowlist its guards with a reason"
        )
    if f.rule == "MLA005":
        return "remove the stale allowlist entry from the matrix"
    return ""


def sarif_fix(f) -> dict | None:
    """A SARIF fix replacing the guard's test with the cache-aware decision (one-line
    `NAME == 1` guards only)."""
    if f.rule != "MLA001" or not f.test_span or not SIMPLE.match(f.guard) or f.path.endswith(".rs"):
        return None
    line, col, end_line, end_col = f.test_span
    if line != end_line:
        return None
    return {
        "description": {
            "text": "widen the single-query guard to the cache-aware decision; define T "
            "(the cached latent length after the update) and import use_absorbed"
        },
        "artifactChanges": [
            {
                "artifactLocation": {"uri": uri(f.path)},
                "replacements": [
                    {
                        "deletedRegion": {
                            "startLine": line,
                            "startColumn": col,
                            "endLine": end_line,
                            "endColumn": end_col,
                        },
                        "insertedContent": {"text": cache_aware(f.guard)},
                    }
                ],
            }
        ],
    }
