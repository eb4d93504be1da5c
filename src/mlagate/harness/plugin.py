"""The pytest plugin: parametrises suites with the matrix's cases and records one result per case.

A suite is a pytest module `suites/<kind>/test_<suite>.py` whose tests take the `mla` fixture.
A test passes or fails with plain asserts; `Invalid` (or a worker crash) makes the case
invalid, never failed; an argued case is recorded without running anything.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mlagate import crossover, lifeline, results
from mlagate.harness import Invalid, crashes, policy
from mlagate.harness.context import Context
from mlagate.harness.crashes import pytest_handlecrashitem  # noqa: F401 - an xdist hook, found here by pytest
from mlagate.harness.scripts import reference_error
from mlagate.harness.timing import MAX_LOOPS, Timing, calibrated_loops  # noqa: F401 - importable here as before
from mlagate.matrix import Geometry, Module, Profile, thaw
from mlagate.matrix import default_path as default_matrix
from mlagate.plan import Case

RESULT_KEY = "mlagate_result"


def pytest_addoption(parser):
    g = parser.getgroup("mlagate")
    g.addoption(
        "--mlagate-matrix",
        default=None,
        help="matrix.yaml to expand (default: ./matrix.yaml, else the bundled one)",
    )
    g.addoption("--mlagate-profile", default="quick", help="profile of the matrix: quick or full")
    g.addoption(
        "--mlagate-backend",
        default=None,
        help="cpu, metal or cuda (default: the runner's declared backend)",
    )
    g.addoption(
        "--mlagate-runner",
        default=None,
        help="runner label (default: $MLAGATE_RUNNER, else linux-cpu / macos-metal)",
    )
    g.addoption(
        "--mlagate-out",
        default="reports/latest",
        help="output directory; results go to OUT/results/",
    )
    g.addoption(
        "--mlagate-module", action="append", default=[], help="only this module (repeatable)"
    )
    g.addoption("--mlagate-arm", action="append", default=[], help="only this arm (repeatable)")
    g.addoption(
        "--mlagate-cache",
        default=None,
        help="arm cache directory (default: $MLAGATE_CACHE or ~/.cache/mlagate)",
    )
    g.addoption(
        "--mlagate-aa",
        action="store_true",
        help="A/A mode: compare every arm with a second worker of itself",
    )
    g.addoption(
        "--mlagate-cpu",
        default="auto",
        help="pin every worker to this CPU: auto (Linux outside xdist: the highest CPU allowed), "
        "none, or a number",
    )
    g.addoption(
        "--mlagate-plan",
        default=None,
        help="OUT/plan.json written by mlagate run: the matrix, cases and arm installs, decided "
        "once",
    )
    g.addoption(
        "--mlagate-cases",
        default=None,
        help="a JSON list of case ids: only these run (a shard, from mlagate run --shard)",
    )


def pytest_configure(config):
    lifeline.watch_parent()  # under mlagate run: die with it (mlagate.lifeline)
    crashes.note_worker_pid(config)
    config.addinivalue_line(
        "markers", "mla_suite(name): the matrix suite this test module implements"
    )
    config.addinivalue_line(
        "markers",
        "mla_checkpoints: the suite loads checkpoints itself (every suite runs a held checkpoint "
        "through CaseRun.build)",
    )
    config._mlagate = None
    if config.getoption("--mlagate-matrix") or config.getoption("--mlagate-plan"):
        _context(
            config
        )  # an explicit matrix is validated before collection: a bad one is a usage error


def _context(config) -> Context:
    if config._mlagate is None:
        config._mlagate = Context(config)
    return config._mlagate


def _suite_name(metafunc) -> str:
    marker = metafunc.definition.get_closest_marker("mla_suite")
    if marker:
        return marker.args[0]
    return Path(str(metafunc.definition.fspath)).stem.removeprefix("test_")


def pytest_generate_tests(metafunc):
    if "mla" not in metafunc.fixturenames:
        return
    ctx = _context(metafunc.config)
    cases = ctx.cases(_suite_name(metafunc))
    metafunc.parametrize("mla_case", cases, ids=[c.id.split("::", 1)[1] for c in cases])


@pytest.fixture(scope="session")
def mla_context(request) -> Context:
    ctx = _context(request.config)
    yield ctx
    if ctx._pool is not None:
        ctx._pool.close()


@pytest.fixture
def mla(request, mla_context, mla_case):
    run = CaseRun(mla_context, mla_case)
    request.node._mla_run = run
    if mla_case.evidence == "argued":
        run.argue()
        pytest.skip(run.result.reason)
    if mla_context.matrix.suites[mla_case.suite].kind == "performance" and os.environ.get(
        "PYTEST_XDIST_WORKER"
    ):
        raise Invalid(
            "performance suites never run under xdist: run them serially (tox -e perf, or mlagate "
            "run without -n)"
        )
    yield run
    if mla_context._pool is not None:
        mla_context._pool.release()


class CaseRun(Timing):
    """A suite's handle on one case: build models in the arm's worker, step them, record
    evidence."""

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

    # --- shapes -------------------------------------------------------------------------

    @property
    def heads(self) -> int:
        """The profile's head count, never more than the real checkpoint has."""
        return min(self.profile.heads, self.geometry.num_attention_heads)

    def shapes(self) -> dict:
        p, g = self.profile, self.geometry
        return {
            "heads": self.heads,
            "hidden_size": p.hidden_size,
            "q_lora_rank": None if g.q_lora_rank is None else min(g.q_lora_rank, p.q_lora_rank),
            "vocab_size": p.vocab_size,
            "cache_lengths": list(p.cache_lengths),
            "widths": list(p.widths),
            "real_heads": g.num_attention_heads,
            "real_hidden_size": g.hidden_size,
        }

    @property
    def kpool(self) -> int:
        """The sparse indexer's pool width (1 where it does not pool: every cached key is its own
        window)."""
        ix = self.geometry.indexer
        return ix.kpool if ix is not None and ix.kpool else 1

    @property
    def index_topk(self) -> int | None:
        ix = self.geometry.indexer
        return None if ix is None else min(ix.topk, self.profile.index_topk)

    def beyond_topk(self, offset: int) -> int:
        """A cache length `offset` tokens past the indexer's top-k (the profile's cap where the
        module has no indexer), so every query of a sparse module really selects."""
        return (self.index_topk or self.profile.index_topk) + offset

    def config(self, arm: str | None = None, layers: int | None = None) -> dict:
        """The module's tiny-model config in an arm: its own keys plus the scaled geometry (r, n, v,
        rope untouched).

        layers asks for a whole model of at least that many decoder layers: the layer count
        key the config carries is raised, then the module's `deep` keys apply."""
        p, g, keys = self.profile, self.geometry, self.module.geometry_keys
        shapes = self.shapes()
        geo = {
            "kv_lora_rank": g.kv_lora_rank,
            "qk_nope_head_dim": g.qk_nope_head_dim,
            "v_head_dim": g.v_head_dim,
            "qk_rope_head_dim": g.qk_rope_head_dim,
            "num_attention_heads": self.heads,
            "hidden_size": p.hidden_size,
            "q_lora_rank": shapes["q_lora_rank"],
        }
        if g.indexer is not None:
            geo.update(
                {
                    "index_n_heads": min(g.indexer.n_heads, p.index_heads),
                    "index_head_dim": g.indexer.head_dim,
                    "index_topk": self.index_topk,
                }
            )
            if g.indexer.kpool is not None:
                geo["index_kpool"] = g.indexer.kpool
        config = {"vocab_size": p.vocab_size, **thaw(self.module.config_for(arm or self.case.arm))}
        if "num_key_value_heads" in config:
            config["num_key_value_heads"] = self.heads
        for name, value in geo.items():
            target = keys.get(name, name)
            if target:
                config[target] = value
        if layers:
            for name in ("num_hidden_layers", "num_layers"):
                if name in config:
                    config[name] = max(config[name], layers)
            config.update(thaw(self.module.deep))
        return config

    # --- worker -------------------------------------------------------------------------

    def _build_request(
        self,
        arm: str,
        dtype: str,
        quant: dict | None,
        forced: bool,
        seed: int,
        score_scale: float = 1,
        layers: int | None = None,
    ) -> dict:
        g = self.geometry
        ckpt = self.checkpoint_path
        return {
            "key": "|".join(
                map(
                    str,
                    (
                        self.module.id,
                        g.id,
                        dtype,
                        quant,
                        forced,
                        seed,
                        score_scale,
                        self.profile.id,
                    ),
                )
            )
            + (f"|layers={layers}" if layers else "")
            + (f"|checkpoint={ckpt}" if ckpt else ""),
            "score_scale": score_scale,
            "checkpoint": ckpt,
            "import": self.module.import_path,
            "model": self.module.model,
            "args": self.module.args,
            "attention": self.module.attention_for(arm),
            "config": self.config(arm, layers),
            "dtype": dtype,
            "quant": quant,
            "seed": seed,
            "forced": forced,
            "geometry": {
                "heads": self.heads,
                "r": g.kv_lora_rank,
                "n": g.qk_nope_head_dim,
                "v": g.v_head_dim,
            },
        }

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

    @property
    def checkpoint_path(self) -> str | None:
        """The local path of the case's real checkpoint on this runner (checkpoint evidence), else
        None."""
        if self.case.checkpoint is None:
            return None
        return self.ctx.matrix.checkpoints[self.case.checkpoint].runners.get(self.case.runner)

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
    ) -> dict:
        """Run token scripts on a built model (mlagate.worker.rollback) and compare (tested,
        reference) pairs in the worker.
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
        )
        broken = reference_error(reply)
        assert not broken, broken
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

    def finish(self, verdict: str, reason: str = "", stderr: str = "") -> Path:
        if self.result.verdict != "argued":
            self.result.verdict, self.result.reason = verdict, reason
        self.result.stderr = stderr
        self.result.duration_s = time.perf_counter() - self._t0
        return results.write(self.result, self.ctx.out / "results", self.case.file_stem)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    run: CaseRun | None = getattr(item, "_mla_run", None)
    if run is None:
        if (
            call.when == "setup"
            and call.excinfo is not None
            and "mla_case" in getattr(item, "fixturenames", ())
        ):
            case = item.callspec.params["mla_case"]
            run = CaseRun(_context(item.config), case)
            item._mla_run = run
        else:
            return
    if getattr(item, "_mla_written", False):
        return
    if call.when == "setup" and rep.skipped and run.result.verdict == "argued":
        path = run.finish("argued")
    elif call.when == "call" or (call.when == "setup" and call.excinfo is not None):
        end = policy.ending(call.excinfo.value if call.excinfo else None)
        if end.exception:
            run.result.metrics["exception"] = end.exception
        path = run.finish(end.verdict, end.reason, end.stderr)
        if end.verdict == "invalid" and rep.outcome == "failed":
            rep.outcome = "skipped"
            rep.longrepr = (str(item.fspath), item.location[1] or 0, f"INVALID: {end.reason}")
    else:
        return
    item._mla_written = True
    rep.user_properties.append((RESULT_KEY, str(path)))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    paths = []
    for key in ("passed", "failed", "skipped"):
        for rep in terminalreporter.stats.get(key, []):
            paths.extend(v for k, v in getattr(rep, "user_properties", []) if k == RESULT_KEY)
    if not paths:
        return
    rows = [results.read(Path(p)) for p in sorted(set(paths)) if Path(p).exists()]
    terminalreporter.section("mlagate verdicts")
    terminalreporter.write_line(results.table(results.summarise(rows)))
