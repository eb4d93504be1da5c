def check():
    """A wide step of S tokens on a cache primed past the indexer's top-k should give the logits
    of the same S tokens fed one at a time, within the suite's budget (only the summation order
    differs)."""
    model, cm, budget = build_model(), cache_module(), CASE["budget_ulps"]
    failed, tried = [], 0
    for beyond in CASE["beyond_topk"]:
        primed = CASE["config"]["index_topk"] + beyond
        prompt = tokens(primed, 1)
        for width in CASE["widths"]:
            tried += 1
            draft = tokens(width, 2 + width)
            wide = cm.make_prompt_cache(model)
            logits(model, prompt, wide)
            together = logits(model, draft, wide)
            one = cm.make_prompt_cache(model)
            logits(model, prompt, one)
            apart = [logits(model, [t], one)[0] for t in draft]
            errs = [ulps(apart[j], together[j]) for j in range(width)]
            worst = max(errs)
            first = next((primed + j for j, e in enumerate(errs) if e > budget), None)
            print(f"cache {primed}, wide step of {width}: vs one at a time {worst:g} ULP")
            if worst > budget:
                failed.append(
                    f"cache {primed}, S = {width}: {worst:g} ULP from position {first} on"
                )
    return bool(failed), (
        f"{len(failed)} of {tried} wide steps differ from the same tokens fed one at a time "
        f"beyond {budget} ULP" + (f"; first: {failed[0]}" if failed else "")
    )


if __name__ == "__main__":
    versions()
    finish(*check())
