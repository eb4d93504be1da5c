import inspect
import random

SEEN = {}  # (run, indexer, position) -> the key positions it selected
RUN = [None]
INDEXERS = {}


def watch_indexers(module):
    """Record, per run, the top-k every sparse indexer of the module returns at each position."""
    watched = []
    for name, cls in list(vars(module).items()):
        if not (isinstance(cls, type) and name.endswith("Indexer") and "__call__" in vars(cls)):
            continue
        call = cls.__call__

        def recording(self, *args, _call=call, **kwargs):
            bound = inspect.signature(_call).bind(self, *args, **kwargs)
            cache = bound.arguments.get("cache")
            offset = getattr(cache, "offset", 0) if cache is not None else 0
            out = _call(self, *args, **kwargs)
            if isinstance(out, mx.array):
                who = INDEXERS.setdefault(id(self), len(INDEXERS))
                rows = out.reshape(out.shape[0], -1, out.shape[-1])[0].tolist()
                for i, row in enumerate(rows):
                    SEEN[(RUN[0], who, offset + i)] = tuple(sorted(row))
            return out

        cls.__call__ = recording
        watched.append(name)
    if not watched:
        raise SystemExit(f"no indexer class in {CASE['import']}: nothing selects")
    print(f"watching {', '.join(watched)}")


def speculative(model, cm, prompt, rng):
    """Verify rounds of the suite's widths, j of L accepted, the rest trimmed through the
    runtime's trim_prompt_cache, then a decode: the kept tokens."""
    cache = cm.make_prompt_cache(model)
    if not cm.can_trim_prompt_cache(cache):
        raise SystemExit("the runtime cannot trim this model's cache: no rollback to measure")
    logits(model, prompt, cache)
    kept, rounds = [], []
    vocab = CASE["config"]["vocab_size"]
    for r in range(CASE["rounds"]):
        L = CASE["widths"][r % len(CASE["widths"])]
        drafted = [rng.randrange(vocab) for _ in range(L)]
        j = rng.randint(0, L)
        logits(model, drafted, cache)
        if L - j:
            cm.trim_prompt_cache(cache, L - j)
        kept += drafted[:j]
        if j < L or rng.random() < 0.5:
            fix = rng.randrange(vocab)
            logits(model, [fix], cache)
            kept.append(fix)
        rounds.append((L, j))
    return kept, rounds


def check():
    """Each position's selections during speculative rounds (verify, accept j, trim) should be
    those of decoding the kept tokens one at a time from the same primed cache."""
    module, cm = importlib.import_module(CASE["import"]), cache_module()
    watch_indexers(module)
    model = build_model(module)
    T = CASE["config"]["index_topk"] + CASE["beyond_topk"]
    differ, compared = [], 0
    for seed in CASE["seeds"]:
        prompt = tokens(T, seed)
        RUN[0] = ("speculative", seed)
        kept, rounds = speculative(model, cm, prompt, random.Random(seed))
        RUN[0] = ("plain", seed)
        plain = cm.make_prompt_cache(model)
        logits(model, prompt, plain)
        for t in kept:
            logits(model, [t], plain)
        print(f"seed {seed}: cache {T}, rounds (L, accepted) {rounds}, {len(kept)} kept")
        for who in range(len(INDEXERS)):
            for pos in range(T, T + len(kept)):
                a = SEEN.get((("speculative", seed), who, pos))
                b = SEEN.get((("plain", seed), who, pos))
                if a is None or b is None:
                    raise SystemExit(f"seed {seed} indexer {who} position {pos}: no selection")
                compared += 1
                if a != b:
                    swapped = sorted(set(a) ^ set(b))
                    differ.append(f"seed {seed} indexer {who} position {pos}: {swapped[:4]}")
    for line in differ[:5]:
        print(f"differs: {line} (key positions in one selection only)")
    if differ:
        return True, (
            f"{len(differ)} of {compared} (indexer, position) selections of the speculative "
            f"rounds differ from decoding the kept tokens one at a time (first: {differ[0]})"
        )
    return False, f"{compared} of {compared} (indexer, position) selections equal decoding"


if __name__ == "__main__":
    versions()
    finish(*check())
