"""l1_unchanged: with the same weights, inputs and backend, the L = 1 output of a module is
bitwise identical between an arm and its baseline (the patched arm and its stock arm), and
the path counters agree. Any difference fails with the first differing element.
"""

import base64
import struct

from mlagate.harness import Invalid, check


def first_difference(a: dict, b: dict) -> str | None:
    """None when the two encoded outputs are bitwise equal, else where and how they first differ."""
    if a["shape"] != b["shape"] or a["dtype"] != b["dtype"]:
        return f"shape/dtype {a['shape']} {a['dtype']} vs {b['shape']} {b['dtype']}"
    x, y = base64.b64decode(a["b64"]), base64.b64decode(b["b64"])
    if x == y:
        return None
    size = 2 if a["dtype"] in ("bfloat16", "float16") else 4
    i = next(k for k in range(0, len(x), size) if x[k : k + size] != y[k : k + size]) // size
    index, rest = [], i
    for dim in reversed(a["shape"]):
        index.append(rest % dim)
        rest //= dim
    return (
        f"element {tuple(reversed(index))}: {_value(x, i, a['dtype'])!r} vs "
        f"{_value(y, i, a['dtype'])!r}"
    )


def _value(raw: bytes, i: int, dtype: str) -> float:
    if dtype == "float32":
        return struct.unpack_from("<f", raw, 4 * i)[0]
    bits = struct.unpack_from("<H", raw, 2 * i)[0]
    if dtype == "bfloat16":
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
    return struct.unpack("<e", struct.pack("<H", bits))[0]


def test_l1_unchanged(mla):
    arm = mla.case.arm
    baseline = mla.ctx.matrix.arms[arm].baseline
    base_key, _ = mla.build(arm=baseline)
    key, _ = mla.build()
    try:
        mla.share_weights((baseline, base_key), (arm, key))
    except Exception as exc:  # noqa: BLE001  (any refusal means the two arms do not hold the same parameters)
        raise Invalid(
            "the two arms' models do not hold the same parameters, so their outputs cannot be "
            f"compared: {exc}"
        ) from exc
    diffs = []
    for T in (*mla.gates["caches"], 0):
        ours = mla.step(key, T, 1, want_output=True)
        theirs = mla.step(base_key, T, 1, arm=baseline, want_output=True)
        if ours["path"] != theirs["path"]:
            diffs.append(
                (
                    "wrong_path",
                    f"T={T}: {arm} took {ours['path']}, {baseline} took {theirs['path']}",
                )
            )
        where = first_difference(ours["output"], theirs["output"])
        if where:
            diffs.append(
                ("numerical_mismatch", f"T={T}: L = 1 output differs from {baseline} at {where}")
            )
    mla.metric("compared_with", baseline)
    check(diffs, shown=len(diffs))


ORDER = 40  # where the report lists it among the correctness suites
