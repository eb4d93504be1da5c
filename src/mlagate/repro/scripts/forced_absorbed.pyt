def check():
    """The attention's absorbed branch, forced for a verify step of L >= 2 tokens on a warm
    cache, should run and give the logits of the same tokens decoded one at a time (L = 1, the
    absorbed branch unforced)."""
    module, cm, budget = forced_module(), cache_module(), CASE["budget_ulps"]
    model = build_model(module)
    prompt = tokens(CASE["prompt"], 1)
    for width in CASE["widths"]:
        draft = tokens(width, 2 + width)
        one = cm.make_prompt_cache(model)
        logits(model, prompt, one)
        decoded = [logits(model, [t], one)[0] for t in draft]
        wide = cm.make_prompt_cache(model)
        logits(model, prompt, wide)
        module.FORCE = "absorbed"
        try:
            verify = logits(model, draft, wide)
        except Exception as exc:
            return True, (
                f"{CASE['attention']}'s absorbed branch forced at L = {width} (cache "
                f"{len(prompt)}) raises {type(exc).__name__}: {exc} ({raised_at(exc)})"
            )
        finally:
            module.FORCE = None
        worst = max(ulps(decoded[j], verify[j]) for j in range(width))
        print(f"L = {width}: forced absorbed verify vs decoding {worst:g} ULP")
        if worst > budget:
            return True, (
                f"{CASE['attention']}'s absorbed branch forced at L = {width} (cache "
                f"{len(prompt)}) runs but differs from decoding by {worst:g} ULP (budget {budget})"
            )
    return False, (
        f"{CASE['attention']}'s absorbed branch forced at L = {CASE['widths']} (cache "
        f"{len(prompt)}) runs and equals decoding within {budget} ULP"
    )


if __name__ == "__main__":
    versions()
    finish(*check())
