def check():
    """--max-kv-size serving: make_prompt_cache(model, max_kv_size=W) should give a rotating
    cache that holds at most W tokens."""
    model, cm, size = build_model(), cache_module(), CASE["max_kv_size"]
    cache = cm.make_prompt_cache(model, max_kv_size=size)
    held = kinds(cache)
    print(f"make_prompt_cache(model, max_kv_size={size}): {held}")
    if any("Rotating" in k for k in held):
        return False, f"make_prompt_cache(model, max_kv_size={size}) gave {', '.join(held)}"
    n = size + 8
    model(mx.array([tokens(n, 1)]), cache=cache)
    sizes = sorted({c.offset for c in leaves(cache) if isinstance(getattr(c, "offset", None), int)})
    return True, (
        f"make_prompt_cache(model, max_kv_size={size}) gave {', '.join(held)} (no rotating cache): "
        f"the module's make_cache ignores max_kv_size; after {n} tokens the caches hold {sizes}"
    )


if __name__ == "__main__":
    versions()
    finish(*check())
