def watch(model):
    """Record, per attention, whether embed_q expands the latent into keys (transpose=False: the
    materialised path) or folds into the query (the absorbed path)."""
    seen = []

    def record(self, x, transpose=True):
        seen.append("absorbed" if transpose else "materialised")
        return type(self).__bases__[0].__call__(self, x, transpose)

    count = 0
    for _, mod in model.named_modules():
        if type(mod).__name__ == CASE["attention"] and "embed_q" in mod:
            base = type(mod.embed_q)
            mod.embed_q.__class__ = type(base.__name__, (base,), {"__call__": record})
            count += 1
    if not count:
        raise SystemExit(f"no {CASE['attention']} with an embed_q: cannot watch its path")
    return seen


def check():
    """Each step of L tokens on a cache of T should take the path the runtime's own rule
    (models/mla.py: L == 1 or L <= max_absorbed_queries(r, n, v, T + L)) chooses."""
    model, cm = build_model(), cache_module()
    try:
        rule = importlib.import_module(f"{ROOT}.models.mla").max_absorbed_queries
    except (ImportError, AttributeError):
        raise SystemExit(f"{ROOT} has no models/mla.py max_absorbed_queries: no rule to check")
    seen = watch(model)
    geo = CASE["geometry"]
    wrong, tried = [], 0
    for cached in [0, *CASE["warm_caches"]]:
        prompt = tokens(cached, 1)
        for width in CASE["widths"]:
            tried += 1
            cache = cm.make_prompt_cache(model)
            if cached:
                mx.eval(model(mx.array([prompt]), cache=cache))
            seen.clear()
            mx.eval(model(mx.array([tokens(width, 2 + width)]), cache=cache))
            took = "materialised" if "materialised" in seen else "absorbed" if seen else "none"
            bound = rule(geo["r"], geo["n"], geo["v"], cached + width)
            want = "absorbed" if width == 1 or width <= bound else "materialised"
            if took != want:
                wrong.append(f"T = {cached}, L = {width}: {took} (the rule: {want}, bound {bound})")
                print(wrong[-1])
    return bool(wrong), (
        f"{len(wrong)} of {tried} steps of {CASE['attention']} take another path than the "
        f"runtime's max_absorbed_queries chooses" + (f"; first: {wrong[0]}" if wrong else "")
    )


if __name__ == "__main__":
    versions()
    finish(*check())
