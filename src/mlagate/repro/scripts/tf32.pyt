def check():
    """A float32 matmul on the default device should agree with a float64 reference within
    float32 rounding; the tiny model's float32 logits there should agree with the CPU's."""
    if CASE["dtype"] != "float32":
        raise SystemExit(f"this check is for float32, not {CASE['dtype']}")
    geo, budget = CASE["geometry"], CASE["budget_ulps"]
    worst = 0.0
    for rows, inner, cols in ((64, geo["r"], geo["heads"] * geo["n"]), (64, geo["r"], 1024)):
        a = mx.random.normal((rows, inner), key=mx.random.key(CASE["seed"] + inner))
        b = mx.random.normal((inner, cols), key=mx.random.key(CASE["seed"] + cols))
        out = a @ b
        mx.eval(out)
        with mx.stream(mx.cpu):
            ref = a.astype(mx.float64) @ b.astype(mx.float64)
            got = ulps(ref, out)
        print(f"float32 matmul ({rows}x{inner}) @ ({inner}x{cols}) on {mx.default_device()}: "
              f"{got:g} float32 ULPs from float64 ({got / 8192:.3g} TF32 ULPs)")
        worst = max(worst, got)
    model = build_model()
    toks = tokens(CASE["prompt"], 1)
    here = logits(model, toks, None)
    with mx.stream(mx.cpu):
        cpu = logits(model, toks, None)
    apart = ulps(cpu, here)
    print(f"{CASE['model']} logits of a {len(toks)}-token prompt, {mx.default_device()} vs the "
          f"CPU: {apart:g} float32 ULPs at max |logits|")
    if worst > budget:
        return True, (
            f"float32 matmuls on {mx.default_device()} are {worst:g} float32 ULPs from float64 "
            f"(budget {budget}; one TF32 ULP is 8192): they are computed in reduced precision "
            f"(TF32), and the model's logits move by {apart:g} ULPs against the CPU"
        )
    return False, (
        f"float32 matmuls on {mx.default_device()} are within {worst:g} float32 ULPs of float64 "
        f"(budget {budget}); the model's logits are {apart:g} ULPs from the CPU's"
    )


if __name__ == "__main__":
    versions()
    finish(*check())
