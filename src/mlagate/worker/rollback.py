"""Token scripts with rollback, run inside an arm's worker.

A script primes a cache of the runtime's own classes, then feeds steps of tokens; a verify
step keeps only its first `keep` tokens and rolls the rest back through the runtime's own
API (its speculative cache transaction, else `trim_prompt_cache`, else each cache's `trim`).
While it runs, the logits of every position still in the cache, the top-k each sparse
indexer returned for it, and snapshots of every cache's public state (offset and `state`)
are kept in the worker; two scripts are then compared there, so only small verdict
evidence crosses the pipe.

The selections are observed at the indexer's own return value (its class is swapped for a
subclass whose __call__ records the result, per instance, as the path probes do), not read
from a private field. A private pool field (mlx-vlm 0.6.17's `_pool`) is snapshotted too,
labelled private, and reported as evidence only.

Imports only the stdlib here; MLX and the runtime arrive through the worker.
"""

from __future__ import annotations

import importlib

from mlagate.worker import tracing
from mlagate.worker.runcompare import PRIVATE_POOL, compare_runs
from mlagate.worker.stepping import root_of


class RollbackRefused(RuntimeError):
    """The runtime's own API would not roll the cache back (a cache says it cannot be trimmed)."""


class Selections:
    """Records what every sparse indexer of a model returns, in call order."""

    def __init__(self):
        self.calls: list = []
        self.indexers = 0

    def attach(self, model, attention_cls: str) -> int:
        for _, mod in model.named_modules():
            if type(mod).__name__ == attention_cls and isinstance(mod.get("indexer"), dict):
                self._wrap(mod["indexer"])
                self.indexers += 1
        return self.indexers

    def _wrap(self, indexer) -> None:
        base = type(indexer)
        calls = self.calls

        def __call__(self, *args, **kwargs):
            out = base.__call__(self, *args, **kwargs)
            calls.append(out[0] if isinstance(out, tuple) else out)
            return out

        indexer.__class__ = type(
            base.__name__, (base,), {"__call__": __call__, "__module__": base.__module__}
        )


def has_transaction(cache_state) -> bool:
    """Whether the runtime's `speculative.cache_state` module (None: it has none) holds its
    speculative cache transaction (the one rule, for rollback scripts and per-row rejection)."""
    return cache_state is not None and hasattr(cache_state, "start_speculative_cache")


def prompt_trim(cache_mod):
    """The runtime's cache-list trim, `trim_prompt_cache`, or None where it has none (each
    cache's own `trim` then): the one rule for rollback, per-row rejection and prompt reuse."""
    return getattr(cache_mod, "trim_prompt_cache", None)


def drop_tokens(cache_mod, cache: list, n: int) -> None:
    """Drop the last n tokens of a cache list by prompt_trim's rule."""
    trim = prompt_trim(cache_mod)
    if trim is not None:
        trim(cache, n)
    else:
        for c in cache:
            c.trim(n)


def rollback_api(package: str, route: str | None = None) -> tuple[str, object]:
    """The runtime's own way to drop rejected tokens: (name, module providing it), from package,
    the module's own runtime package (mlagate.worker.importers.runtime_root). With route
    "trim", its cache-level way (trim_prompt_cache, else each cache's trim) even where it has a
    speculative cache transaction: the rollback its drafters and prompt-cache reuse call."""
    try:
        txn = importlib.import_module(f"{package}.speculative.cache_state")
        if has_transaction(txn) and route != "trim":
            return "transaction", txn
    except ImportError:
        pass
    cache_mod = importlib.import_module(f"{package}.models.cache")
    if prompt_trim(cache_mod) is not None:
        return "trim_prompt_cache", cache_mod
    return "trim", cache_mod


def leaves(caches) -> list:
    """The non-container caches of a model's cache list, in order (CacheList unpacked)."""
    out = []
    for c in caches:
        if c is None:
            continue
        inner = getattr(c, "caches", None)
        if isinstance(inner, (list, tuple)):
            out.extend(leaves(inner))
        else:
            out.append(c)
    return out


def refusing(cache, needs: tuple[str, ...], trimmable: bool, flat: bool = True) -> list[str]:
    """The cache classes of `cache` (its leaves; with flat=False the list's own entries) lacking
    one of `needs`, or (with `trimmable`) saying they cannot be trimmed, sorted, each once."""
    caches = leaves(cache) if flat else [c for c in cache if c is not None]
    return sorted(
        {
            type(c).__name__
            for c in caches
            if not all(hasattr(c, n) for n in needs)
            or (trimmable and hasattr(c, "is_trimmable") and not c.is_trimmable())
        }
    )


def _flat(value, prefix: str, into: list) -> None:
    if value is None:
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _flat(v, f"{prefix}[{i}]", into)
    elif hasattr(value, "shape") and hasattr(value, "dtype"):
        into.append((prefix, value))


def snapshot(mx, caches) -> list[dict]:
    """Every leaf cache's public offset and state arrays (copied), plus a private pool if one
    exists."""
    snap = []
    for c in leaves(caches):
        arrays: list = []
        _flat(getattr(c, "state", None), "state", arrays)
        offset = _int(getattr(c, "offset", None))
        entry = {
            "type": type(c).__name__,
            "offset": offset,
            "arrays": [(name, mx.array(_live(a, offset))) for name, a in arrays],
            "private": [],
        }
        pool = c.__dict__.get(PRIVATE_POOL)
        if isinstance(pool, tuple):
            parts: list = []
            _flat(list(pool), f"private:{PRIVATE_POOL}", parts)
            entry["private"] = [(name, mx.array(a)) for name, a in parts]
            entry["private_length"] = _int(pool[-1])
        mx.eval([a for _, a in entry["arrays"] + entry["private"]])
        snap.append(entry)
    return snap


def _live(a, offset):
    """The live part of a (B, H, T, D) state array: a cache that preallocates (mlx-lm's KVCache
    returns its whole buffer as state) holds stale rows past its offset, which mean nothing."""
    if (
        isinstance(offset, int)
        and not isinstance(offset, bool)
        and a.ndim == 4
        and a.shape[2] > offset
    ):
        return a[..., :offset, :]
    return a


def _int(value):
    if isinstance(value, int):  # bool too
        return value
    try:
        if value is not None and getattr(value, "size", 0) == 1:
            return int(value.item())
    except (TypeError, ValueError):
        pass
    return None


class ScriptRun:
    """One script's observations: logits and selections by absolute position, snapshots by mark."""

    def __init__(self):
        self.logits: dict[int, object] = {}
        self.topk: dict[
            tuple[int, int], object
        ] = {}  # (indexer call order in a forward, position) -> sorted row or "dense"
        self.marks: dict[str, list[dict]] = {}
        self.log: list[dict] = []
        self.length = 0
        self.error: dict | None = None  # the step at which the runtime raised, if it did
        self.not_run: str | None = None  # why a script of the "trim" route was not (fully) run

    def drop_from(self, position: int) -> None:
        self.logits = {p: v for p, v in self.logits.items() if p < position}
        self.topk = {k: v for k, v in self.topk.items() if k[1] < position}


def run_script(worker, entry: dict, script: dict, selections: Selections) -> ScriptRun:
    """script["rollback"] == "trim" asks for the cache-level route: not run where the runtime's
    own rollback is that already, and stopped (not failed) where a cache refuses the trim."""
    mx = worker.mx
    route = script.get("rollback")
    root = root_of(worker, entry)
    name, api = rollback_api(root, route)
    if route == "trim" and rollback_api(root)[0] == name:
        run = ScriptRun()
        run.rollback, run.not_run = name, f"the runtime's own rollback is {name} already"
        return run
    prompt, force = script["prompt"], script.get("force")
    counters = entry.get("counters")
    if force is not None and entry.get("forcing") is None:
        raise RuntimeError("forcing asked of a model built without forced guards")
    _, cache = worker._prefilled(entry, prompt["T"], prompt["seed"], 0, prompt.get("chunk", 512))
    run = ScriptRun()
    run.length = prompt["T"]
    if script.get("mark_prompt"):
        run.marks["prompt"] = snapshot(mx, cache)
    for i, step in enumerate(script["steps"]):
        tokens = mx.array([step["tokens"]], dtype=mx.int32)
        S = tokens.shape[1]
        keep = step.get("keep")
        txn = (
            api.start_speculative_cache(cache, S)
            if (keep is not None and name == "transaction")
            else None
        )
        selections.calls.clear()
        try:
            out = _forward(worker, entry, tokens, cache, force)
        except Exception as exc:  # noqa: BLE001  (the runtime raising inside a script is evidence, compared with the reference run)
            run.error = {
                "step": i,
                "length": run.length,
                "S": S,
                "error": f"{type(exc).__name__}: {exc}".splitlines()[0],
                "at": tracing.runtime_frame(exc, worker.arm_dir) or tracing.innermost_frame(exc),
            }
            break
        start = run.length
        rows = out[0].astype(mx.float32)
        mx.eval(rows)
        for j in range(S):
            run.logits[start + j] = rows[j]
        for order, sel in enumerate(selections.calls):
            if sel is None:
                for j in range(S):
                    run.topk[(order, start + j)] = "dense"
                continue
            rows_sel = mx.sort(sel.reshape(-1, sel.shape[-2], sel.shape[-1])[0], axis=-1).tolist()
            first = (
                start + S - len(rows_sel)
            )  # an indexer that returns only the last rows covers the last positions
            for j, row in enumerate(rows_sel):  # a negative index pads a selection: no token
                run.topk[(order, first + j)] = [t for t in row if t >= 0]
        run.length += S
        record = {"step": i, "S": S, "indexer_calls": len(selections.calls)}
        if counters is not None:
            record["path"] = counters.summary()["path"]
        if keep is not None:
            try:
                record.update(_reject(mx, name, api, cache, txn, S, keep))
            except RollbackRefused as exc:
                if route != "trim":
                    raise
                run.not_run = f"refused at step {i} ({run.length} tokens cached): {exc}"
                break
            run.length -= S - keep
            run.drop_from(run.length)
        run.log.append(record)
        if step.get("mark"):
            run.marks[step["mark"]] = snapshot(mx, cache)
    run.rollback = name
    return run


def _forward(worker, entry: dict, tokens, cache, force):
    """One step on the path asked (None: natural), the counters cleared before it."""
    forcing = entry.get("forcing")
    if entry.get("counters") is not None:
        entry["counters"].clear()
    if forcing is not None:
        forcing.mode = force
    try:
        out = worker._forward(entry["model"], tokens, cache)
        worker.mx.eval(out)
        return out
    finally:
        if forcing is not None:
            forcing.mode = None


def _reject(mx, name: str, api, cache, txn, S: int, keep: int) -> dict:
    """Keep the first `keep` of the S tokens just fed, through the runtime's own API."""
    k = S - keep
    if name == "transaction":
        txn.commit([keep])
        return {"rollback": name, "rejected": k}
    if k == 0:
        return {"rollback": name, "rejected": 0}
    if name == "trim_prompt_cache":
        if hasattr(api, "can_trim_prompt_cache") and not api.can_trim_prompt_cache(cache):
            raise RollbackRefused(
                "can_trim_prompt_cache says the cache cannot be trimmed "
                f"({', '.join(sorted({type(c).__name__ for c in leaves(cache)}))})"
            )
        trimmed = api.trim_prompt_cache(cache, k)
        return {
            "rollback": name,
            "rejected": k,
            "trimmed": _int(trimmed) if not isinstance(trimmed, list) else None,
        }
    refused = refusing(cache, (), trimmable=True, flat=False)
    if refused:
        raise RollbackRefused(
            f"is_trimmable() is False for {', '.join(refused)}: the runtime cannot "
            "drop rejected tokens"
        )
    trimmed = [c.trim(k) for c in cache]
    return {"rollback": name, "rejected": k, "trimmed": _int(trimmed[0]) if trimmed else None}


def run_pairs(worker, req: dict) -> dict:
    """The worker op: run named scripts on one built model, compare the requested pairs."""
    mx = worker.mx
    entry = worker.models[req["key"]]
    sel = entry.get("selections")
    if sel is None:
        sel = entry["selections"] = Selections()
        sel.attach(entry["model"], req["attention"])
    runs = {name: run_script(worker, entry, script, sel) for name, script in req["scripts"].items()}
    if req.get("causal_below"):  # a selection of every key up to its query means dense
        for r in runs.values():
            r.topk = {
                k: "dense" if row != "dense" and set(range(k[1] + 1)) <= set(row) else row
                for k, row in r.topk.items()
            }
    reply = {
        "indexers": sel.indexers,
        "rollback": next(iter(runs.values())).rollback if runs else None,
        "layers": len(getattr(entry["model"], "layers", [])),
    }
    reply["logs"] = {name: r.log for name, r in runs.items()}
    if req.get("causal_below"):
        reply["short_masks"] = {
            name: found
            for name, r in runs.items()
            if (found := short_mask(r, req["causal_below"])) is not None
        }
    dtype, margin = req.get("dtype", "float32"), req.get("margin_ulps", 0.0)
    reply["pairs"] = {
        f"{t}|{r}": (
            {"not_run": runs[t].not_run}
            if runs[t].not_run
            else compare_runs(mx, runs[t], runs[r], dtype, margin)
        )
        for t, r in req["pairs"]
    }
    return reply


def short_mask(run: ScriptRun, below: int) -> dict | None:
    """The first selection of a position p < `below` (a query that sees no more keys than the
    indexer's top-k) that misses a key 0..p: there the sparse mask must equal the causal one."""
    for (order, p), row in sorted(run.topk.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if p >= below or row == "dense":
            continue
        missing = sorted(set(range(p + 1)) - set(row))
        if missing:
            return {"position": p, "indexer": order, "missing": missing[:8]}
    return None
