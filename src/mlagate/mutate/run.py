"""Run mutants through the correctness suites, cheapest suite first, and classify them.

A mutant is killed by a suite when a case of that suite that passes on the unmutated
(parent) arm fails on the mutant, or that fails on the parent fails on the mutant with a
failure kind the parent's fail does not name (the gate's changed failure: serving_batched's
expected `not_expressible` fails still judge the rest of the case). A case that is invalid
on the mutant (the harness could not measure, or the worker died) kills nothing: a mutant
whose only effect is invalid cases is ONLY INVALID. The parent's verdicts are measured once
per (module, suite) in the same pytest run as the first mutants that need them, and kept in
OUT/expected.json under the parent's cache key, so a later run over the same arm reuses them.

Each round runs one suite over every mutant still alive (all of them with --all), in one
pytest process (xdist -n WORKERS), so stopping at the first kill costs no extra start-up.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mlagate import lifeline, results, runplan
from mlagate.arm import arms as arms_mod
from mlagate.gate import launch, shard
from mlagate.gate import run as execute
from mlagate.matrix import Matrix, MatrixError, load
from mlagate.mutate import arms as mutant_arms
from mlagate.mutate import killmatrix, operators
from mlagate.plan import Case, PlanError, Selection, expand

ROLES = ("patched", "head")


@dataclass(frozen=True)
class Options:
    arms: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    operators: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()
    mutants: tuple[str, ...] = ()  # ids or globs
    all: bool = False
    out: Path = Path("reports/mutate")
    workers: int = 1
    cache: Path | None = None
    profile: str = "quick"
    backend: str = "cpu"
    runner: str = "linux-cpu"
    cpu: str = "auto"


@dataclass
class _Entry:
    mutant: operators.Mutant
    arm_id: str
    patch_file: Path
    killed_by: list[str] = field(default_factory=list)
    invalid_in: list[str] = field(default_factory=list)
    controls: int = 0  # cases run that pass on the parent (or fail there with known kinds)
    seconds: float = 0.0


def check(matrix: Matrix, opts: Options) -> None:
    """Bad arguments are a one-line usage error before anything runs."""
    Selection(opts.suites, opts.modules, opts.arms).check(matrix)
    for op in opts.operators:
        if op not in operators.OPERATORS:
            raise execute.UsageError(
                f"--operator: unknown operator {op!r} (known: {', '.join(operators.OPERATORS)})"
            )
    for s in opts.suites:
        if matrix.suites[s].kind != "correctness":
            raise execute.UsageError(
                f"--suite {s}: mutants run through correctness suites only ({s} is "
                f"{matrix.suites[s].kind})"
            )
    for a in opts.arms:
        if matrix.arms[a].role not in ROLES:
            raise execute.UsageError(
                f"--arm {a}: role {matrix.arms[a].role}; mutants are made of patched or head arms"
            )


def suite_order(matrix: Matrix, opts: Options, costs: shard.Costs) -> list[str]:
    chosen = opts.suites or tuple(s for s, v in matrix.suites.items() if v.kind == "correctness")
    return sorted(
        chosen, key=lambda s: (costs.suites.get(s, {}).get("default", shard.UNKNOWN_COST_S), s)
    )


def generate(
    matrix: Matrix, opts: Options, installs: dict[str, arms_mod.ArmInstall]
) -> list[operators.Mutant]:
    found = []
    for arm_id in _parents(matrix, opts):
        mods = [
            (m.id, m.import_path, m.attention_for(arm_id))
            for m in matrix.modules.values()
            if matrix.arms[arm_id] in matrix.arms_for(m)
            and (not opts.modules or m.id in opts.modules)
            and installs[arm_id].has_module(m.import_path)
        ]
        found += operators.generate_many(
            arm_id, installs[arm_id].site, mods, opts.operators or None
        )
    if opts.mutants:
        found = [
            m for m in found if any(m.id == p or fnmatch.fnmatchcase(m.id, p) for p in opts.mutants)
        ]
        if not found:
            raise execute.UsageError(f"--mutant: no mutant id matches {', '.join(opts.mutants)}")
    return found


def _parents(matrix: Matrix, opts: Options) -> list[str]:
    return list(opts.arms) or [a.id for a in matrix.arms.values() if a.role in ROLES]


def equivalent_reason(matrix: Matrix, mutant: operators.Mutant, backend: str = "cpu") -> str | None:
    for e in matrix.equivalent_mutants:
        if (
            e.arm == mutant.arm
            and e.backend in (None, backend)
            and (e.mutant == mutant.id or fnmatch.fnmatchcase(mutant.id, e.mutant))
        ):
            return e.reason
    return None


def mutate(
    matrix: Matrix, opts: Options, costs: shard.Costs | None = None
) -> killmatrix.KillMatrix:
    started = time.time()
    check(matrix, opts)
    installs = execute.installs_for(
        matrix, Selection(arms=tuple(_parents(matrix, opts))), opts.cache
    )
    mutants = generate(matrix, opts, installs)
    killmatrix.set_aside(opts.out)
    argued = {
        (m.arm, m.id): r
        for m in mutants
        if (r := equivalent_reason(matrix, m, opts.backend)) is not None
    }
    entries = [_prepare(m, installs[m.arm], opts) for m in mutants if (m.arm, m.id) not in argued]
    order = suite_order(matrix, opts, costs or shard.load_costs())
    derived = write_matrix(matrix, entries, opts.out / "mutants" / "matrix.yaml")
    expected = _Expected(opts.out / "expected.json")
    rounds: list[dict] = []
    by_key = {(e.mutant.arm, e.mutant.id): e for e in entries}
    for suite in order:
        alive = [e for e in entries if opts.all or not e.killed_by]
        if not alive:
            break
        rounds.append(_round(matrix, derived, suite, alive, installs, expected, opts))
        doc = killmatrix.build(
            matrix, opts, mutants, argued, by_key, order, rounds, time.time() - started
        )
        killmatrix.write(
            doc, opts.out, partial=True
        )  # what is measured so far survives an interruption
    doc = killmatrix.build(
        matrix, opts, mutants, argued, by_key, order, rounds, time.time() - started
    )
    killmatrix.write(doc, opts.out)
    return doc


def _prepare(m: operators.Mutant, parent: arms_mod.ArmInstall, opts: Options) -> _Entry:
    digest = hashlib.sha256(f"{m.arm}\n{m.id}\n{m.patch}".encode()).hexdigest()[:10]
    folder = opts.out / "mutants" / "patches"
    folder.mkdir(parents=True, exist_ok=True)
    patch = folder / f"{digest}.patch"
    patch.write_text(m.patch, encoding="utf-8")
    arm_id = f"{m.arm}.mut-{digest}"
    mutant_arms.materialise(
        parent, mutant_arms.mutant_arm(parent.arm, arm_id, patch), [m.file], opts.cache
    )
    return _Entry(m, arm_id, patch)


def write_matrix(matrix: Matrix, entries: list[_Entry], path: Path) -> Path:
    """The matrix plus one arm per mutant (its parent's entry and one more patch)."""
    raw = yaml.safe_load(Path(matrix.path).read_text(encoding="utf-8"))
    base = Path(matrix.path).resolve().parent
    for arm in raw["arms"].values():
        if "path" in arm:
            arm["path"] = str((base / arm["path"]).resolve())
        arm["patches"] = [str((base / p).resolve()) for p in arm.get("patches") or []]
    for e in entries:
        parent = raw["arms"][e.mutant.arm]
        raw["arms"][e.arm_id] = {
            **parent,
            "patches": [*parent["patches"], str(e.patch_file.resolve())],
        }
        for module in raw["modules"].values():
            if e.mutant.arm in (module.get("arms") or []):
                module["arms"].append(e.arm_id)
            if e.mutant.arm in (module.get("overrides") or {}):
                module["overrides"][e.arm_id] = module["overrides"][e.mutant.arm]
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.loads(json.dumps(raw))  # no shared objects, so the YAML holds no anchors or aliases
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


class _Expected:
    """The parent's verdict per case id, under its cache key; kept on disk between runs."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.data = {}

    def get(self, key: str, case_id: str) -> str | None:
        return self.data.get(key, {}).get(case_id)

    def put(self, key: str, case_id: str, verdict: str) -> None:
        self.data.setdefault(key, {})[case_id] = verdict

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=1, sort_keys=True), encoding="utf-8")


def _round(matrix, derived, suite, alive, installs, expected, opts) -> dict:
    t0 = time.time()
    parent_cases: dict[tuple[str, str], list[Case]] = {}
    for e in alive:
        key = (e.mutant.arm, e.mutant.module)
        if key not in parent_cases:
            sel = Selection((suite,), (e.mutant.module,), (e.mutant.arm,))
            cs = expand(matrix, sel, opts.profile, opts.backend, opts.runner, installs)
            parent_cases[key] = [c for c in cs if c.evidence != "argued"]
    todo = [
        c
        for cs in parent_cases.values()
        for c in cs
        if expected.get(installs[c.arm].key, c.id) is None
    ]
    mutant_cases = {
        e.arm_id: [
            dataclasses.replace(c, arm=e.arm_id)
            for c in parent_cases[(e.mutant.arm, e.mutant.module)]
        ]
        for e in alive
    }
    chosen = todo + [c for cs in mutant_cases.values() for c in cs]
    out = opts.out / "rounds" / suite
    rows = (
        {r["case_id"]: r for r in _pytest(derived, matrix, suite, chosen, out, opts)}
        if chosen
        else {}
    )
    for c in todo:
        expected.put(installs[c.arm].key, c.id, _outcome(rows.get(c.id)))
    expected.save()
    for e in alive:
        _classify(
            e,
            suite,
            parent_cases[(e.mutant.arm, e.mutant.module)],
            mutant_cases[e.arm_id],
            rows,
            expected,
            installs,
        )
    return {
        "suite": suite,
        "mutants": len(alive),
        "cases": len(chosen),
        "parent_cases": len(todo),
        "seconds": round(time.time() - t0, 1),
    }


def _kinds(row: dict) -> set[str]:
    failure = row.get("failure") or {}
    return set(failure.get("kinds") or [failure.get("kind")]) - {None}


def _outcome(row: dict | None) -> str:
    """A parent case's verdict as kept in expected.json; a fail with its kinds
    ("fail:a,b")."""
    if row is None:
        return "missing"
    if row["verdict"] == "fail" and _kinds(row):
        return "fail:" + ",".join(sorted(_kinds(row)))
    return row["verdict"]


def _classify(e: _Entry, suite, parents, mine, rows, expected, installs) -> None:
    for parent, case in zip(parents, mine, strict=True):
        was = expected.get(installs[parent.arm].key, parent.id) or ""
        if was != "pass" and not was.startswith("fail:"):
            continue
        e.controls += 1
        row = rows.get(case.id)
        e.seconds += float(row.get("duration_s", 0.0)) if row else 0.0
        verdict = row["verdict"] if row else "missing"
        if verdict == "fail" and was.startswith("fail:"):
            verdict = "fail" if _kinds(row) - set(was[5:].split(",")) else "as before"
        if verdict == "fail" and suite not in e.killed_by:
            e.killed_by.append(suite)
        elif verdict in ("invalid", "missing") and suite not in e.invalid_in:
            e.invalid_in.append(suite)


def _run_plan(derived: Path, suite: str, chosen: list[Case], out: Path, opts: Options) -> Path:
    """OUT/plan.json of one round: the derived matrix (the mutant arms in it), the chosen
    cases as that matrix expands them, and the installs of their arms and baselines."""
    try:
        dm = load(derived)
        arms = sorted({c.arm for c in chosen})
        wanted = {a.id for m in dm.modules.values() for a in dm.arms_for(m) if a.id in arms}
        wanted |= {dm.arms[a].baseline for a in wanted if dm.arms[a].baseline}
        installs = arms_mod.materialise_all(dm, sorted(wanted), opts.cache)
        sel = Selection((suite,), (), tuple(arms))
        every = expand(dm, sel, opts.profile, opts.backend, opts.runner, installs)
    except (MatrixError, PlanError, arms_mod.ArmError) as exc:
        raise execute.UsageError(str(exc)) from None
    ids = {c.id for c in chosen}
    cases = tuple(c for c in every if c.id in ids)
    plan = runplan.HandOff(dm, opts.profile, opts.backend, opts.runner, False, cases, installs)
    return runplan.write(out, plan)


def _pytest(
    derived: Path, matrix: Matrix, suite: str, chosen: list[Case], out: Path, opts: Options
) -> list[dict]:
    execute.set_aside(out)
    out.mkdir(parents=True, exist_ok=True)
    plan_file = _run_plan(derived, suite, chosen, out, opts)
    suite_path = launch.suite_file(matrix, suite)
    job = launch.Launch(
        plan_file,
        (suite_path,),
        out,
        lifeline.new_run_id(),
        cpu=opts.cpu,
        cache=opts.cache,
        workers=opts.workers,
    )
    code = launch.call(job, out / "pytest.log")
    if code not in launch.OK_CODES:
        raise execute.UsageError(
            f"pytest stopped with exit status {code} running {suite_path.stem} over mutants (see "
            f"{out / 'pytest.log'})"
        )
    wanted = {c.id for c in chosen}
    return [r for r in results.load_dir(out / "results") if r["case_id"] in wanted]
