import statistics
import time


def absorbed_wins(L, T, r, n, v):
    """The cost model the fix computes (exact integers): per head the absorbed path costs
    L*r*d + 2*L*T*r and the materialised one T*r*d + L*T*d, d = n + v, T after the step."""
    d = n + v
    return 2 * r <= d or L * (r * d + (2 * r - d) * T) < r * d * T


def widest_absorbed(T_before, r, n, v):
    L = 1
    while absorbed_wins(L + 1, T_before + L + 1, r, n, v):
        L += 1
    return L


def timed(model, module, cache, toks, force):
    """One step of toks on the primed cache on the forced path, then the cache trimmed back."""
    module.FORCE = force
    try:
        start = time.perf_counter()
        mx.eval(model(mx.array([toks]), cache=cache))
        return time.perf_counter() - start
    finally:
        module.FORCE = None
        cache_module().trim_prompt_cache(cache, len(toks))


def check():
    """At the formula's widest absorbed width on a warm cache the two paths cost the same
    operations, so the absorbed path should be at most the suite's tolerance slower there."""
    geo, T, tol, samples = CASE["geometry"], CASE["cache"], CASE["tolerance"], CASE["samples"]
    module = forced_module()
    model = build_model(module)
    cache = cache_module().make_prompt_cache(model)
    prompt = tokens(T, 1)
    for i in range(0, T, 2048):
        logits(model, prompt[i : i + 2048], cache)
    b = widest_absorbed(T, geo["r"], geo["n"], geo["v"])
    widths = [w for w in (32, 64, 128) if w < b] + [b]
    print(f"cache {T}, {geo['heads']} heads, r/n/v {geo['r']}/{geo['n']}/{geo['v']}, "
          f"{CASE['dtype']}: the formula absorbs up to L = {b}")
    change = {}
    for L in widths:
        toks = tokens(L, 2 + L)
        for force in ("absorbed", "materialised", "absorbed", "materialised"):
            timed(model, module, cache, toks, force)
        pairs = []
        for i in range(samples):
            order = ("absorbed", "materialised") if i % 2 == 0 else ("materialised", "absorbed")
            t = {f: timed(model, module, cache, toks, f) for f in order}
            pairs.append(t["absorbed"] / t["materialised"] - 1)
        change[L] = statistics.median(pairs)
        print(f"L = {L}: absorbed vs materialised {change[L]:+.1%} (median of {samples} pairs, "
              f"{min(pairs):+.1%}..{max(pairs):+.1%})")
    if change[b] > tol:
        return True, (
            f"at the formula's widest absorbed width L = {b} (cache {T}, {geo['heads']} heads) the "
            f"absorbed path is {change[b]:+.1%} slower than the materialised one (tolerance "
            f"{tol:.0%}): the cost model keeps steps on the slower path on {mx.default_device()}"
        )
    return False, (
        f"at the formula's widest absorbed width L = {b} (cache {T}, {geo['heads']} heads) the "
        f"absorbed path is {change[b]:+.1%} against the materialised one (tolerance {tol:.0%})"
    )


if __name__ == "__main__":
    versions()
    finish(*check())
