"""The plan: the matrix expanded into cases, each with its evidence level."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from mlagate import documents, guardmodel
from mlagate.arm import packs
from mlagate.arm.arms import ArmInstall
from mlagate.caseid import CaseId
from mlagate.matrix import Arm, Matrix, Module
from mlagate.modulefiles import module_file
from mlagate.scan import guards as scanner
from mlagate.verdict import expectations

EVIDENCE = ("checkpoint", "synthetic", "argued")


class PlanError(ValueError):
    """A selection or discovery problem; one line."""


@dataclass(frozen=True)
class Case:
    suite: str
    module: str
    arm: str
    geometry: str
    dtype: str
    backend: str
    profile: str
    runner: str
    evidence: str
    checkpoint: str | None = None
    # A/A: the arm against a second worker of itself (a noise-floor case, never the arm's verdict)
    aa: bool = False
    expected: str = "pass"  # the verdict the gate expects (mlagate.verdict.expectations)
    expectation: str = ""  # why
    control: bool = False  # a control arm's must-fail case
    expected_kinds: tuple[str, ...] = ()  # expected fail: the failure kinds that confirm it
    baseline: str | None = None  # the arm whose same case a fail is paired with (`not fixed`)
    retry: bool = False  # the suite may retry: a flaky case is not red

    @property
    def case_id(self) -> CaseId:
        where = self.checkpoint or self.geometry
        return CaseId(self.suite, self.module, self.arm, where, self.dtype, self.backend, self.aa)

    @property
    def id(self) -> str:
        """The case id as documents carry it."""
        return str(self.case_id)

    @property
    def file_stem(self) -> str:
        return self.case_id.file_stem

    def replay(self, profile: str | None = None) -> str:
        parts = [
            "mlagate run",
            f"--suite {self.suite}",
            f"--module {self.module}",
            f"--arm {self.arm}",
            f"--profile {profile or self.profile}",
        ]
        parts.append(
            f"--out reports/replay/{self.file_stem}"
        )  # its own folder: never the run it came from
        parts += ["--aa"] if self.aa else []
        return " ".join(parts)

    def to_json(self) -> dict:
        return {**asdict(self), "id": self.id}


@dataclass(frozen=True)
class Selection:
    suites: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    arms: tuple[str, ...] = ()

    def check(self, matrix: Matrix) -> None:
        for kind, names, table in (
            ("suite", self.suites, matrix.suites),
            ("module", self.modules, matrix.modules),
            ("arm", self.arms, matrix.arms),
        ):
            for name in names:
                if name not in table:
                    near = [k for k in table if name in k or k.endswith("/" + name)]
                    hint = f" (did you mean {', '.join(near[:3])}?)" if near else ""
                    raise PlanError(f"unknown {kind} {name!r}{hint}")


def expand(
    matrix: Matrix,
    selection: Selection,
    profile: str,
    backend: str,
    runner: str,
    installs: dict[str, ArmInstall] | None = None,
    aa: bool = False,
    keep_skipped: bool = False,
) -> list[Case]:
    """Every case of the selection, in a stable order. Modules absent from an arm's install are left
    out.

    Suites that compare an arm with its baseline get cases only on arms that have one, unless
    aa (A/A mode), where every arm is compared with itself: those cases are marked `aa` and
    have ids of their own, so an A/A result never stands in for the arm's verdict.

    Every case carries its expectation; cases a known finding marks `skip` are left out
    (keep_skipped=True lists them too, for the plan's report of what is not run and why).
    """
    selection.check(matrix)
    if profile not in matrix.profiles:
        raise PlanError(f"unknown profile {profile!r} (matrix has {', '.join(matrix.profiles)})")
    cases = []
    for suite in selection.suites or tuple(matrix.suites):
        paired = matrix.suites[suite].baseline and not aa
        self_paired = matrix.suites[suite].baseline and aa
        dtype = matrix.suites[suite].gates.get("dtype", matrix.profiles[profile].dtype)
        for module in _suite_modules(matrix, selection, suite):
            for arm in _module_arms(matrix, selection, module, installs, paired):
                cases += _arm_cases(
                    matrix,
                    suite,
                    module,
                    arm,
                    runner,
                    dtype=dtype,
                    backend=backend,
                    profile=profile,
                    aa=self_paired,
                )
    return [
        c
        for c in map(lambda c: _expected(matrix, c), cases)
        if c.expected != "skip" or keep_skipped
    ]


def _suite_modules(matrix: Matrix, selection: Selection, suite: str) -> list[Module]:
    """The matrix's modules a suite runs on: its own list (when it has one), sparse modules only
    for a sparse suite, and only the selected ones."""
    only = matrix.suites[suite].modules
    return [
        module
        for module in matrix.modules.values()
        if (only is None or module.id in only)
        and not (matrix.suites[suite].sparse and not module.sparse)
        and not (selection.modules and module.id not in selection.modules)
    ]


def _module_arms(
    matrix: Matrix,
    selection: Selection,
    module: Module,
    installs: dict[str, ArmInstall] | None,
    paired: bool,
) -> list[Arm]:
    """The selected arms of a module that hold it (when installs are given) and, for a suite
    compared with a baseline, have a baseline among the module's arms."""
    arms = []
    for arm in matrix.arms_for(module):
        if selection.arms and arm.id not in selection.arms:
            continue
        if installs is not None and (
            arm.id not in installs or not installs[arm.id].has_module(module.import_path)
        ):
            continue
        if paired and (
            arm.baseline is None or arm.baseline not in {a.id for a in matrix.arms_for(module)}
        ):
            continue
        arms.append(arm)
    return arms


def _arm_cases(
    matrix: Matrix, suite: str, module: Module, arm: Arm, runner: str, **common
) -> list[Case]:
    """One synthetic case per geometry of the module, then one per checkpoint of it: checkpoint
    evidence on the checkpoint's runners, argued on the others. `common`: dtype, backend,
    profile and aa."""
    cases = [
        Case(suite, module.id, arm.id, geometry, runner=runner, evidence="synthetic", **common)
        for geometry in module.geometries
    ]
    for cp in matrix.checkpoints.values():
        if cp.module == module.id:
            evidence = "checkpoint" if runner in cp.runners else "argued"
            cases.append(
                Case(
                    suite,
                    module.id,
                    arm.id,
                    cp.geometry,
                    runner=runner,
                    evidence=evidence,
                    checkpoint=cp.id,
                    **common,
                )
            )
    return cases


def _expected(matrix: Matrix, case: Case) -> Case:
    e = expectations.expect(
        matrix,
        case.suite,
        case.module,
        case.arm,
        case.checkpoint or case.geometry,
        case.backend,
        case.evidence,
        case.dtype,
    )
    return dataclasses.replace(
        case,
        expected=e.verdict,
        expectation=e.why,
        control=e.control,
        expected_kinds=e.kinds,
        baseline=e.baseline,
        retry=matrix.suites[case.suite].retry,
    )


@dataclass(frozen=True)
class Coverage:
    """MLA modules found in an arm that the matrix does not register."""

    arm: str
    missing: tuple[str, ...]


def coverage(matrix: Matrix, installs: dict[str, ArmInstall]) -> list[Coverage]:
    """Discover the MLA modules of each installed arm and compare with the matrix."""
    gaps = []
    for arm_id, inst in installs.items():
        registered = {
            (m.import_path, m.attention_for(arm_id))
            for m in matrix.modules.values()
            if m.runtime == inst.runtime.id
        }
        found = arm_scan(inst).mla_classes
        missing = tuple(
            sorted(f"{imp}:{cls}" for imp, cls in found if (imp, cls) not in registered)
        )
        if missing:
            gaps.append(Coverage(arm_id, missing))
    return gaps


def write_json(cases: list[Case], path: Path) -> None:
    path.write_text(json.dumps([c.to_json() for c in cases], indent=1))


_SCANNER_CODE = (
    Path(scanner.__file__),
    Path(scanner.__file__).with_name("analysis.py"),
    Path(guardmodel.__file__),
)


@dataclass
class ArmScan:
    """What planning reads from an installed arm's source: its MLA classes (scanner.discover)
    and the classes of each module file asked for. Kept in the arm cache beside the arm, keyed
    by the sha256 of its content manifest and of the scanner's code, so it is only reused for
    an arm whose files (checked against that manifest by arms.verify_all first) and scanner are
    the same."""

    inst: ArmInstall
    key: str
    mla_classes: list[tuple[str, str]]
    classes: dict[str, list[str]]

    @property
    def path(self) -> Path:
        return self.inst.dir.parent.parent / "scans" / f"{self.key}.json"  # CACHE/scans

    def classes_of(self, import_path: str) -> set[str]:
        if import_path not in self.classes:
            f = module_file(self.inst.site, import_path)
            if f is None:
                raise FileNotFoundError(f"{self.inst.site}: no module {import_path}")
            tree = ast.parse(f.read_text(encoding="utf-8"))
            self.classes[import_path] = sorted(
                {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
            )
            self.save()
        return set(self.classes[import_path])

    def save(self) -> None:
        doc = {
            "schema": documents.KINDS["arm-scan"],
            "key": self.key,
            "mla_classes": [list(x) for x in self.mla_classes],
            "classes": self.classes,
        }
        try:
            self.path.parent.mkdir(exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only cache: scanned again next time


_SCANS: dict[Path, ArmScan] = {}


def arm_scan(inst: ArmInstall) -> ArmScan:
    """The arm's scan, from the cache when its key matches, else scanned now (and kept); once
    per process and arm."""
    if inst.dir not in _SCANS:
        _SCANS[inst.dir] = _arm_scan(inst)
    return _SCANS[inst.dir]


def _arm_scan(inst: ArmInstall) -> ArmScan:
    h = hashlib.sha256(documents.read_bytes(inst.dir / packs.CONTENT))
    for code in _SCANNER_CODE:
        h.update(code.read_bytes())
    key = h.hexdigest()
    scan = ArmScan(inst, key, [], {})
    try:
        doc = documents.load(scan.path, "arm-scan")
    except documents.DocumentError:
        doc = None
    if doc is not None and doc["key"] == key:
        return ArmScan(inst, key, [tuple(x) for x in doc["mla_classes"]], doc["classes"])
    scan.mla_classes = scanner.discover(inst.site, inst.runtime.package)
    scan.save()
    return scan
