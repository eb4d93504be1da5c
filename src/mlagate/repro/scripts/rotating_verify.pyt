def check():
    """A verify step (L tokens at once) on a rotating cache that fills its W slots should give
    the logits of the same tokens decoded one at a time on the same cache."""
    model, cm, size, budget = build_model(), cache_module(), CASE["max_kv_size"], CASE["budget_ulps"]
    prompt, draft = tokens(CASE["prompt"], 1), tokens(CASE["verify"], 2)
    wide = cm.make_prompt_cache(model, max_kv_size=size)
    if not any("Rotating" in k for k in kinds(wide)):
        raise SystemExit(f"no rotating cache here ({kinds(wide)}): another finding")
    logits(model, prompt, wide)
    verify = logits(model, draft, wide)
    one = cm.make_prompt_cache(model, max_kv_size=size)
    logits(model, prompt, one)
    decoded = [logits(model, [t], one)[0] for t in draft]
    errs = [ulps(decoded[j], verify[j]) for j in range(len(draft))]
    for j, e in enumerate(errs):
        print(f"position {len(prompt) + j}: verify vs decode {e:g} ULP")
    worst = max(errs)
    first = next((len(prompt) + j for j, e in enumerate(errs) if e > budget), None)
    return worst > budget, (
        f"{kinds(wide)} with max_kv_size={size}, prompt {len(prompt)}, verify of {len(draft)}: "
        f"worst {worst:g} ULP (budget {budget})"
        + (f", first past the budget at position {first}" if first is not None else "")
    )


if __name__ == "__main__":
    versions()
    finish(*check())
