def check():
    """Rows batched by the runtime's own batch generator steps (make_prompt_cache per row,
    generate._merge_caches, right-padded prompts with prepare/finalize) should each give the
    logits of the row run alone, prefill and the first decode."""
    model, cm, budget = build_model(), cache_module(), CASE["budget_ulps"]
    gen = importlib.import_module(f"{ROOT}.generate")
    rows = [tokens(n, 10 + i) for i, n in enumerate(CASE["rows"])]
    lengths = [len(r) for r in rows]
    pads = [max(lengths) - n for n in lengths]
    cache = gen._merge_caches([cm.make_prompt_cache(model) for _ in rows])
    for c in cache:
        c.prepare(lengths=lengths, right_padding=pads)
    model(mx.array([r + [0] * p for r, p in zip(rows, pads)]), cache=cache)
    for c in cache:
        c.finalize()
    step = tokens(len(rows), 99)
    batched = model(mx.array([[t] for t in step]), cache=cache)
    worst = {}
    for i, row in enumerate(rows):
        alone = cm.make_prompt_cache(model)
        model(mx.array([row]), cache=alone)
        expected = model(mx.array([[step[i]]]), cache=alone)[0]
        worst[i] = ulps(expected, batched[i])
        print(f"row {i} ({lengths[i]} tokens, {pads[i]} padding): first decode {worst[i]:g} ULP")
    bad = [i for i, e in worst.items() if e > budget]
    return bool(bad), (
        f"rows of {lengths} batched through _merge_caches ({kinds(cache)}): first decode of rows "
        f"{bad or 'none'} differ from their plain runs beyond {budget} ULP "
        f"(worst {max(worst.values()):g})"
    )


if __name__ == "__main__":
    versions()
    finish(*check())
