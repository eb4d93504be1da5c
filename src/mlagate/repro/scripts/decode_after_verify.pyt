import statistics
import time


def decode_rate(model, cache, toks):
    """Tokens a second of plain decoding of toks, one at a time; the cache trimmed back."""
    start = time.perf_counter()
    for t in toks:
        logits(model, [t], cache)
    rate = len(toks) / (time.perf_counter() - start)
    cache_module().trim_prompt_cache(cache, len(toks))
    return rate


def check():
    """Plain decoding on a long cache should keep its speed after verify steps of the
    speculative loop's width have run on the same cache (the runtime's own path for them)."""
    T, n, width = CASE["contexts"][-1], CASE["new_tokens"], CASE["num_draft"] + 1
    cm, slower = cache_module(), CASE["slower_than"]
    model = build_model()
    cache = cm.make_prompt_cache(model)
    prompt = tokens(T, 1)
    for i in range(0, T, 1024):
        logits(model, prompt[i : i + 1024], cache)
    toks = tokens(n, 2)
    for _ in range(2):
        decode_rate(model, cache, toks)
    before = statistics.median(decode_rate(model, cache, toks) for _ in range(5))
    for k in range(2 * n):
        logits(model, tokens(width, 3 + k), cache)
        cm.trim_prompt_cache(cache, width)
    after = statistics.median(decode_rate(model, cache, toks) for _ in range(5))
    said = (
        f"plain decoding at cache {T} ({CASE['geometry']['heads']} heads, {CASE['dtype']}): "
        f"{before:.0f} tok/s before {2 * n} verify steps of {width}, {after:.0f} tok/s after "
        f"({after / before - 1:+.0%})"
    )
    print(said)
    return after < before * (1 - slower), said + f"; slower than {slower:.0%} counts"


if __name__ == "__main__":
    versions()
    finish(*check())
