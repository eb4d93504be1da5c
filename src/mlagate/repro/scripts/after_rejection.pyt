def rollback():
    """The runtime's own way to drop rejected tokens: its speculative cache transaction, else
    trim_prompt_cache, else each cache's trim."""
    try:
        txn = importlib.import_module(f"{ROOT}.speculative.cache_state")
        if hasattr(txn, "start_speculative_cache"):
            return "speculative cache transaction", txn
    except ImportError:
        pass
    cm = cache_module()
    return ("trim_prompt_cache" if hasattr(cm, "trim_prompt_cache") else "each cache's trim"), cm


def verify_and_reject(model, cache, draft, keep, route):
    name, api = route
    txn = api.start_speculative_cache(cache, len(draft)) if name.startswith("spec") else None
    logits(model, draft, cache)
    rejected = len(draft) - keep
    if txn is not None:
        txn.commit([keep])
    elif name == "trim_prompt_cache":
        api.trim_prompt_cache(cache, rejected)
    else:
        for c in cache:
            c.trim(rejected)


def check():
    """After a verify step of S drafted tokens whose last k are rejected through the runtime's
    own rollback, the next token should give the logits of a run that fed only the accepted
    tokens (as one step), within the suite's budget."""
    model, cm, budget, route = build_model(), cache_module(), CASE["budget_ulps"], rollback()
    failed, tried = [], 0
    for beyond in CASE["beyond_topk"]:
        primed = CASE["config"]["index_topk"] + beyond
        prompt = tokens(primed, 1)
        for width in CASE["widths"]:
            for keep in range(width - 1, 0, -1):
                tried += 1
                draft, after = tokens(width, 2 + width), tokens(1, 50 + keep)
                where = f"cache {primed}, verify {width}, reject {width - keep}"
                cache = cm.make_prompt_cache(model)
                logits(model, prompt, cache)
                try:
                    verify_and_reject(model, cache, draft, keep, route)
                    tested = logits(model, after, cache)
                except Exception as exc:
                    said = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                    print(f"{where}: the next decode raises {said} ({raised_at(exc)})")
                    failed.append(f"{where} raises {said}")
                    continue
                plain = cm.make_prompt_cache(model)
                logits(model, prompt, plain)
                logits(model, draft[:keep], plain)
                error = ulps(logits(model, after, plain), tested)
                print(f"{where}: next decode vs the run without the rejected tokens {error:g} ULP")
                if error > budget:
                    failed.append(f"{where} differs by {error:g} ULP (budget {budget})")
    return bool(failed), (
        f"{len(failed)} of {tried} rejections through {route[0]}: the next decode differs from "
        f"the run without the rejected tokens" + (f"; first: {failed[0]}" if failed else "")
    )


if __name__ == "__main__":
    versions()
    finish(*check())
