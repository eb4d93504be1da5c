"""A planted L = 1 slowdown, the activation of benchmarks/l1_power.py's arms (staged there as the
package `l1plant`; it runs in an mlx-lm arm's worker): a busy-wait in every attention call with
one query, L1PLANT_WAITS's seconds at the nearest cache length (sized by the benchmark from the
measured steps)."""

import json
import os
import time

import mlx.core as mx
from mlx_lm.models import deepseek_v3


def install():
    waits = {int(t): s for t, s in json.loads(os.environ.get("L1PLANT_WAITS", "{}")).items()}
    cls = deepseek_v3.DeepseekV3Attention
    runtime_call = cls.__call__
    a = mx.random.normal((64, 64))
    mx.eval(a @ a)
    started = time.perf_counter()
    for _ in range(2000):
        mx.eval(a @ a)
    unit_s = (time.perf_counter() - started) / 2000

    def planted(self, x, mask=None, cache=None):
        if waits and x.shape[1] == 1 and cache is not None:
            wait = waits[min(waits, key=lambda t: abs(t - cache.offset))]
            if os.environ.get("L1PLANT_MODE") == "sleep":
                time.sleep(wait)
            elif os.environ.get("L1PLANT_MODE") == "work":
                for _ in range(round(wait / unit_s)):
                    mx.eval(a @ a)
            else:
                until = time.perf_counter() + wait
                while time.perf_counter() < until:
                    pass
            if os.environ.get("L1PLANT_LOG"):
                with open(os.environ["L1PLANT_LOG"], "a") as fh:
                    fh.write(f"{cache.offset} {wait:.6f}\n")
        return runtime_call(self, x, mask, cache)

    cls.__call__ = planted
