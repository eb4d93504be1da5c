import inspect


def takes_mask(model):
    params = inspect.signature(type(model).__call__).parameters
    return "attention_mask" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )


def check():
    """--kv-bits serving of a batch: the runtime's batched generation builds its caches with
    generate.ar._make_cache(model, left_padding, kv_bits=..., kv_group_size=...); the left-padded
    prompts through them must give each row's logits of the row run alone on a plain cache."""
    model, cm = build_model(), cache_module()
    ar = importlib.import_module(f"{ROOT}.generate.ar")
    bits, group, budget = CASE["bits"], CASE["group_size"], CASE["budget_ulps"]
    rows = [tokens(n, 10 + i) for i, n in enumerate(CASE["rows"])]
    width = max(len(r) for r in rows)
    pads = [width - len(r) for r in rows]
    try:
        cache = ar._make_cache(model, pads, kv_bits=bits, kv_group_size=group)
        print(f"_make_cache(model, {pads}, kv_bits={bits}, kv_group_size={group}): {kinds(cache)}")
        batch = mx.array([[0] * p + r for p, r in zip(pads, rows)], dtype=mx.int32)
        mask = mx.array([[0] * p + [1] * len(r) for p, r in zip(pads, rows)])
        kw = {"attention_mask": mask} if takes_mask(model) else {}
        out = model(batch, cache=cache, **kw)
        out = getattr(out, "logits", out)
        mx.eval(out)
    except Exception as exc:
        frames = [f.name for f in traceback.extract_tb(exc.__traceback__)]
        said = f"{type(exc).__name__}: {exc} ({raised_at(exc)}, in {' > '.join(frames[-3:])})"
        if any("quantiz" in name for name in frames) or "quantized" in str(exc):
            return True, (
                f"quantizing the batched caches of {len(rows)} rows for --kv-bits {bits} raised "
                f"{said}: the batch cannot be served quantized"
            )
        return False, (
            f"the batched caches were quantized; the step then raised {said} (another finding: "
            f"the single quantized cache's, --config q{bits})"
        )
    held = kinds(cache)
    if not any("Quantized" in k for k in held):
        return False, (
            f"_make_cache(kv_bits={bits}) quantized no cache of the batch ({held}): another "
            f"finding, the caches left unquantized (--config q{bits}); nothing of this one shown"
        )
    worst = 0.0
    for r, row in enumerate(rows):
        alone = logits(model, row, cm.make_prompt_cache(model))
        worst = max(worst, ulps(alone[-1], out[r, -1]))
    return worst > budget, (
        f"the last prompt token's logits of the {len(rows)} rows on the batched {bits}-bit "
        f"cache are {worst:g} ULP off their plain runs at worst (budget {budget})"
    )


if __name__ == "__main__":
    versions()
    finish(*check())
