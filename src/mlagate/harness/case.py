"""The case API: `CaseRun`, a suite's handle on one case (the `mla` fixture).

It builds models in an arm's worker, steps them, runs token scripts, shares weights between
arms, compares outputs with a float64 reference, and records the evidence of one result: its
verdict, a fail's kinds, and on a performance suite the machine's health (an unfit machine's
timings are invalid unless the run overrides it). Its shapes and config come from
mlagate.harness.shapes, its timing (prime, interleaved samples) from mlagate.harness.timing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mlagate import crossover, results
from mlagate.contract import metrics
from mlagate.harness.context import Context
from mlagate.harness.errors import Failed, Invalid
from mlagate.harness.policy import RUNTIME_RAISED
from mlagate.harness.scripts import reference_error
from mlagate.harness.shapes import Shapes
from mlagate.harness.timing import Timing
from mlagate.matrix import Geometry, Module, Profile
from mlagate.paths import default_path as default_matrix
from mlagate.plan import Case


class CaseRun(Shapes, Timing):
    """A suite's handle on one case: build models in the arm's worker, step them, record
    evidence."""

    _pass_reason = ""  # a pass's own reason (pass_reason), else policy's "all gates held"

    def __init__(self, ctx: Context, case: Case):
        self.ctx, self.case = ctx, case
        self.module: Module = ctx.matrix.modules[case.module]
        self.geometry: Geometry = ctx.matrix.geometries[case.geometry]
        self.profile: Profile = ctx.profile
        self.gates = ctx.matrix.suites[case.suite].gates
        replay = case.replay()
        if Path(ctx.matrix.path).resolve() != Path(default_matrix()).resolve():
            replay += f" --matrix {ctx.matrix.path}"
        self.result = results.Result(case=case.to_json(), evidence=case.evidence, replay=replay)
        suite = ctx.matrix.suites[case.suite]
        self.result.metrics_version = metrics.version(suite.id, {suite.id: suite.file})
        self.result.tolerance_from = ctx.tolerance_from.get(case.suite)
        self.result.geometry = {
            "id": self.geometry.id,
            "r": self.geometry.kv_lora_rank,
            "n": self.geometry.qk_nope_head_dim,
            "v": self.geometry.v_head_dim,
            "rope": self.geometry.qk_rope_head_dim,
            "source": self.geometry.source,
        }
        self.result.shapes = self.shapes()
        if self.checkpoint_path:
            self.result.shapes["weights"] = (
                f"checkpoint {case.checkpoint} ({self.checkpoint_path}): its own heads, hidden "
                "size and quantisation"
            )
        self._t0 = time.perf_counter()

    # --- worker -------------------------------------------------------------------------

    def _worker(self, arm: str, replica: int = 0):
        w = self.ctx.pool.get(arm, replica)
        if arm == self.case.arm and replica == 0:
            self.result.fingerprint = dict(w.fingerprint)
        detected = w.fingerprint.get("backend")
        if detected != self.case.backend:
            raise Invalid(
                f"runner {self.case.runner} declares backend {self.case.backend}, but MLX runs on "
                f"{detected} "
                f"in the worker of {arm}: budgets for {self.case.backend} would judge {detected} "
                "arithmetic"
            )
        return w

    def call(self, op: str, arm: str | None = None, **req) -> dict:
        """One worker op in an arm's worker (the case's arm by default), under the profile's
        timeout."""
        return self._worker(arm or self.case.arm).call(op, self.profile.timeout_s, **req)

    def build(
        self,
        arm: str | None = None,
        dtype: str | None = None,
        quant: dict | None = None,
        forced: bool = False,
        seed: int = 0,
        score_scale: float = 1,
        replica: int = 0,
        layers: int | None = None,
    ) -> tuple[str, dict]:
        """Build the module's tiny model in an arm's worker; returns (key, build info).

        score_scale multiplies every attention's embed_q weights, which scales the
        attention scores of both paths alike (sharper, less uniform attention).
        layers: a whole model of at least this many decoder layers (see config).
        """
        arm = arm or self.case.arm
        req = self._build_request(
            arm, dtype or self.case.dtype, quant, forced, seed, score_scale, layers
        )
        info = self._worker(arm, replica).call("build", self.profile.timeout_s, **req)
        if info.get("checkpoint"):
            self.result.metrics.setdefault("checkpoint_loaded", {})[arm] = info["checkpoint"]
        return req["key"], info

    def reference(
        self, source_key: str, seed: int = 0, score_scale: float = 1, arm: str | None = None
    ) -> str:
        """A float64 CPU copy of a built model (weights dequantised and upcast): the high-precision
        reference."""
        arm = arm or self.case.arm
        build = {
            **self._build_request(arm, "float32", None, True, seed, score_scale),
            "weights": False,
        }
        key = f"reference|{source_key}"
        self._worker(arm).call(
            "reference", self.profile.timeout_s, key=key, source=source_key, build=build
        )
        return key

    def compare(
        self,
        outputs: dict[str, tuple[str, str | None]],
        reference: str,
        T: int,
        L: int,
        dtype: str,
        seed: int = 1,
        arm: str | None = None,
    ) -> dict:
        """Run each (key, force) and the reference on the same inputs; errors in ULPs of dtype."""
        arm = arm or self.case.arm
        spec = {"T": T, "L": L, "seed": seed, "chunk": self.profile.prefill_chunk}
        return self._worker(arm).call(
            "compare",
            self.profile.timeout_s,
            dtype=dtype,
            outputs={
                name: {**spec, "key": key, "force": force} for name, (key, force) in outputs.items()
            },
            ref={**spec, "key": reference, "force": "materialised"},
        )

    def share_weights(self, source: tuple[str, str], target: tuple[str, str]) -> None:
        """Load the weights of (arm, key) into (arm, key): the same numbers in both arms."""
        folder = self.ctx.out / "tmp"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.case.file_stem}-{os.getpid()}.safetensors"
        try:
            self._worker(source[0]).call(
                "save_weights", self.profile.timeout_s, key=source[1], path=str(path)
            )
            self._worker(target[0]).call(
                "load_weights", self.profile.timeout_s, key=target[1], path=str(path)
            )
        finally:
            path.unlink(missing_ok=True)

    def step(
        self,
        key: str,
        T: int,
        L: int,
        force: str | None = None,
        arm: str | None = None,
        want_output: bool = False,
        seed: int = 1,
    ) -> dict:
        arm = arm or self.case.arm
        obs = self._worker(arm).call(
            "step",
            self.profile.timeout_s,
            key=key,
            T=T,
            L=L,
            force=force,
            seed=seed,
            want_output=want_output,
            chunk=self.profile.prefill_chunk,
        )
        obs["arm"] = arm
        obs["expected"] = crossover.expected_path(L, T, *self.geometry.rnv)
        record = {k: v for k, v in obs.items() if k != "output"}
        self.result.observations.append(record)
        return obs

    def script(
        self,
        key: str,
        scripts: dict[str, dict],
        pairs: list[tuple[str, str]],
        margin_ulps: float = 0.0,
        arm: str | None = None,
        causal_below: int | None = None,
    ) -> dict:
        """Run token scripts on a built model (mlagate.worker.rollback) and compare (tested,
        reference) pairs in the worker. causal_below: also report each script's first selection
        of a position below it that misses a key up to that position.
        A reference script runs the same runtime: one that raised fails the case."""
        arm = arm or self.case.arm
        for sc in scripts.values():
            sc["prompt"].setdefault("chunk", self.profile.prefill_chunk)
        reply = self.call(
            "script",
            arm,
            key=key,
            attention=self.module.attention_for(arm),
            scripts=scripts,
            pairs=[list(p) for p in pairs],
            dtype=self.case.dtype,
            margin_ulps=margin_ulps,
            **({"causal_below": causal_below} if causal_below else {}),
        )
        broken = reference_error(reply)
        if broken:
            raise Failed([RUNTIME_RAISED], broken)
        return reply

    def reproducer(self, **where) -> dict:
        """The smallest description of a failing script: enough to replay it by hand or with the
        replay command."""
        rep = {
            "arm": self.case.arm,
            "module": self.case.module,
            "geometry": self.case.geometry,
            **where,
            "replay": self.result.replay,
        }
        self.result.metrics.setdefault("reproducers", []).append(rep)
        return rep

    def metric(self, name: str, value) -> None:
        self.result.metrics[name] = value

    # --- verdicts -----------------------------------------------------------------------

    def pass_reason(self, reason: str) -> None:
        """What a pass of this case records as its reason instead of "all gates held" (what was
        measured: a speed-up, say); a fail or an invalid keeps its own."""
        self._pass_reason = reason

    def argue(self) -> None:
        """Formula only, nothing run: the row of a checkpoint this runner does not hold."""
        r, n, v = self.geometry.rnv
        cp = self.ctx.matrix.checkpoints[self.case.checkpoint]
        self.result.verdict = "argued"
        self.result.reason = (
            f"checkpoint {cp.id} is not on runner {self.case.runner}: "
            "argued-not-measured (formula only, nothing run)"
        )
        self.result.metrics = {
            "threshold_limit": str(crossover.limit(r, n, v)),
            "table_threshold": crossover.table_threshold(r, n, v),
            "expected_path": {
                f"L={L},T={T}": crossover.expected_path(L, T, r, n, v)
                for T in self.profile.cache_lengths
                for L in (1, 2, 4, 8)
            },
        }

    def finish(
        self, verdict: str, reason: str = "", stderr: str = "", failure: dict | None = None
    ) -> Path:
        if self.result.verdict != "argued":
            if verdict == "pass" and self._pass_reason:
                reason = self._pass_reason
            self.result.verdict, self.result.reason = verdict, reason
            self.result.failure = failure if verdict == "fail" else None
            if self.ctx.matrix.suites[self.case.suite].kind == "performance":
                self._judge_fitness()
        self.result.stderr = stderr
        self.result.duration_s = time.perf_counter() - self._t0
        return results.write(self.result, self.ctx.out / "results", self.case.file_stem)

    def _judge_fitness(self) -> None:
        """A timing verdict from a machine whose health checks failed is invalid, unless the
        run recorded an override (then the reason says so)."""
        record = results.recorded_health()
        self.result.health = record
        r = self.result
        if record is None or record["fit"] or r.verdict not in ("pass", "fail"):
            return
        why = "; ".join(f"{c['name']}: {c['detail']}" for c in record["failed"])
        if record["override"]:
            r.reason += f" (timed on a machine unfit for timings, overridden: {why})"
            return
        record["measured_verdict"] = r.verdict
        r.verdict, r.failure = "invalid", None
        r.reason = (
            f"the machine was unfit for timings ({why}): the measured {record['measured_verdict']} "
            f"is no verdict (run with --allow-unfit to keep it): {r.reason}"
        )
