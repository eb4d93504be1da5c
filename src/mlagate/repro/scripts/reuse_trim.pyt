def check():
    """The next turn of a conversation whose cache holds a prefix and an abandoned branch past
    it: the runtime's per-turn reuse (generate.dispatch._prefix_cache_trim_amount, then each
    cache's trim, as its generate does) should drop the branch, so the follow-up gives the
    logits of a cache that only ever held the prefix, within the suite's budget."""
    model, cm, budget = build_model(), cache_module(), CASE["budget_ulps"]
    dispatch = importlib.import_module(f"{ROOT}.generate.dispatch")
    failed, tried = [], 0
    layers = [type(c).__name__ for c in cm.make_prompt_cache(model)]
    for n in CASE["prefixes"]:
        prefix, branch = tokens(n, 1), tokens(CASE["branch"], 2)
        for f in CASE["follow_ups"]:
            tried += 1
            follow = tokens(f, 3 + f)
            reused = cm.make_prompt_cache(model)
            logits(model, prefix + branch, reused)
            drop = dispatch._prefix_cache_trim_amount(reused, n)
            if drop is None:
                print(f"prefix {n}: the runtime declines to reuse {kinds(reused)} (cold prefill)")
                continue
            for c in reused:
                if drop:
                    c.trim(drop)
            kept = cm.make_prompt_cache(model)
            logits(model, prefix, kept)
            error = ulps(logits(model, follow, kept), logits(model, follow, reused))
            print(
                f"prefix {n} + branch {len(branch)}, follow-up {f}: dropped {drop} of "
                f"{len(branch)}; vs the kept prefix {error:g} ULP"
            )
            if error > budget:
                failed.append(
                    f"prefix {n}, follow-up {f}: dropped {drop} of {len(branch)} tokens past the "
                    f"prefix, {error:g} ULP"
                )
    return bool(failed), (
        f"{len(failed)} of {tried} follow-ups on a reused {sorted(set(layers))} cache "
        f"differ from the kept prefix beyond {budget} ULP"
        + (f"; first: {failed[0]}" if failed else "")
    )


if __name__ == "__main__":
    versions()
    finish(*check())
