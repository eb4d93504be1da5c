def quantizer():
    for name in ("generate.common", "generate"):
        try:
            module = importlib.import_module(f"{ROOT}.{name}")
        except ImportError:
            continue
        if hasattr(module, "maybe_quantize_kv_cache"):
            return module.maybe_quantize_kv_cache
    raise SystemExit("the runtime has no maybe_quantize_kv_cache")


def check():
    """--kv-bits serving: the runtime's maybe_quantize_kv_cache after every call, from the first
    token; the next decode step must give the plain cache's logits within the budget."""
    model, cm, quantize = build_model(), cache_module(), quantizer()
    bits, group, budget = CASE["bits"], CASE["group_size"], CASE["budget_ulps"]
    prompt, step = tokens(CASE["prompt"], 1), tokens(1, 2)
    plain = cm.make_prompt_cache(model)
    logits(model, prompt, plain)
    expected = logits(model, step, plain)
    cache = cm.make_prompt_cache(model)
    logits(model, prompt, cache)
    quantize(cache, 0, group, bits)
    held = kinds(cache)
    print(f"after maybe_quantize_kv_cache(cache, 0, {group}, {bits}): {held}")
    if not any("Quantized" in k for k in held):
        return True, (
            f"maybe_quantize_kv_cache left every cache unquantized ({', '.join(held)}): "
            f"--kv-bits {bits} silently serves full precision"
        )
    try:
        got = logits(model, step, cache)
    except AttributeError as exc:
        return True, (
            f"the first decode step on the quantized cache raised AttributeError: {exc}"
        )
    err = ulps(expected, got)
    return err > budget, f"the decode step on the {bits}-bit cache is {err:g} ULP off (budget {budget})"


if __name__ == "__main__":
    versions()
    finish(*check())
