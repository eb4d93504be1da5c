"""Why timed workers are pinned to one CPU: a timeline of L = 1 step times in two workers of one
arm.

    python benchmarks/vcpu_timeline.py [--pin same|different|none] [--samples 200] [--T 1024]
    [--loops 5]

Two long-lived workers of the patched mlx-lm arm build the quick profile's DeepSeek-V3 model
(4 heads, hidden 256, r/n/v 512/128/128), prime a cache of T tokens and take interleaved
samples of the L = 1 step (each repeated `loops` times, re-warmed first), as the
performance suites do. `same` pins both to the highest CPU allowed (what `mlagate run`
does), `different` pins them to the lowest and highest, `none` leaves them to the scheduler.
Prints, per worker, the share of samples 25 % above the overall median ("slow"), then the
A/A change between the workers over blocks of 5 and 21 samples (share beyond 2 %, largest).
Linux only (sched_setaffinity).
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mlagate import matrix, paths  # noqa: E402
from mlagate.arm import arms  # noqa: E402
from mlagate.harness.supervisor import PIN_ENV, WorkerProcess  # noqa: E402

CONFIG = {
    "vocab_size": 256,
    "model_type": "deepseek_v3",
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_key_value_heads": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "qk_rope_head_dim": 64,
    "num_attention_heads": 4,
    "hidden_size": 256,
    "q_lora_rank": 128,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pin", choices=("same", "different", "none"), default="same")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--loops", type=int, default=5)
    args = ap.parse_args()
    m = matrix.load(paths.default_path())
    arm = m.arms["mlx-lm-0.32.2-patched"]
    inst = arms.materialise(arm, m.runtimes[arm.runtime])
    allowed = sorted(os.sched_getaffinity(0))
    cpus = {
        "same": [allowed[-1]] * 2,
        "different": [allowed[0], allowed[-1]],
        "none": [None, None],
    }[args.pin]
    workers = [WorkerProcess(inst, env={PIN_ENV: str(c)} if c is not None else None) for c in cpus]
    build = {
        "key": "k",
        "import": "mlx_lm.models.deepseek_v3",
        "model": "Model",
        "args": "ModelArgs",
        "attention": "DeepseekV3Attention",
        "config": CONFIG,
        "dtype": "float32",
        "quant": None,
        "seed": 0,
        "forced": False,
        "geometry": {"heads": 4, "r": 512, "n": 128, "v": 128},
    }
    try:
        for w in workers:
            w.hello()
            w.call("build", 300, **build)
            w.call("prime", 300, key="k", T=args.T, seed=1, horizon=64, chunk=512)
        times: list[list[float]] = [[], []]
        for i in range(args.samples):
            for k in (0, 1) if i % 2 == 0 else (1, 0):
                times[k].append(
                    workers[k].call("sample", 300, key="k", L=1, loops=args.loops)["seconds"]
                )
    finally:
        for w in workers:
            w.close()
    slow = 1.25 * statistics.median(times[0] + times[1])
    report = {
        "pin": args.pin,
        "cpus": cpus,
        "T": args.T,
        "loops": args.loops,
        "median_ms": round(statistics.median(times[0] + times[1]) * 1e3, 3),
        "slow_share": [round(sum(t > slow for t in ts) / len(ts), 3) for ts in times],
    }
    for block in (5, 21):
        changes = [
            statistics.median(times[0][i : i + block]) / statistics.median(times[1][i : i + block])
            - 1
            for i in range(0, args.samples - block + 1, block)
        ]
        report[f"blocks_of_{block}"] = {
            "n": len(changes),
            "beyond_2pct": round(sum(abs(c) > 0.02 for c in changes) / len(changes), 3),
            "largest": round(max(map(abs, changes)), 4),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
