import statistics
import time


def rate(loop, caches, base):
    """Tokens a second of one of the runtime's generation loops run to its end; each cache
    trimmed back to base tokens after."""
    start = time.perf_counter()
    n = sum(1 for _ in loop)
    if hasattr(mx, "synchronize"):
        mx.synchronize()
    seconds = time.perf_counter() - start
    for cache in caches:
        cache_module().trim_prompt_cache(cache, cache[0].offset - base)
    return n / seconds


def check():
    """Plain decoding on a long cache should keep its speed once the runtime's speculative loop
    (verify steps of width num_draft + 1, the stock arm materialising each) ran on the same cache.
    The suite's order: each plain run after a speculative run; before, plain runs after plain
    runs only, the cache never verified."""
    T, n, k = CASE["contexts"][-1], CASE["new_tokens"], CASE["num_draft"]
    cm, slower = cache_module(), CASE["slower_than"]
    gen = importlib.import_module(f"{ROOT}.generate")
    model = build_model()
    prompt = mx.array(tokens(T, 1))
    target, draft = cm.make_prompt_cache(model), cm.make_prompt_cache(model)
    for cache in (target, draft):
        for i in range(0, T - 1, 1024):
            model(prompt[None, i : min(T - 1, i + 1024)], cache=cache)
            mx.eval([c.state for c in cache])
    last = prompt[T - 1 :]

    def plain():
        loop = gen.generate_step(last, model, max_tokens=n, prompt_cache=target)
        return rate(loop, [target], T - 1)

    def speculative():
        loop = gen.speculative_generate_step(
            last, model, model, num_draft_tokens=k, max_tokens=n, prompt_cache=target + draft
        )
        return rate(loop, [target, draft], T - 1)

    for _ in range(2):
        plain()
    before = [plain() for _ in range(5)]
    speculative()
    after = []
    for _ in range(5):
        speculative()
        after.append(plain())
    b, a = statistics.median(before), statistics.median(after)
    said = (
        f"plain decoding of {n} tokens at cache {T - 1} ({CASE['geometry']['heads']} heads, "
        f"{CASE['dtype']}): {b:.0f} tok/s after plain runs (runs {min(before):.0f} to "
        f"{max(before):.0f}), {a:.0f} tok/s each right after a speculative run of {n} tokens "
        f"with verify steps of {k + 1} (runs {min(after):.0f} to {max(after):.0f}; {a / b - 1:+.0%})"
    )
    print(said)
    return a < b * (1 - slower), said + f"; slower than {slower:.0%} counts"


if __name__ == "__main__":
    versions()
    finish(*check())
