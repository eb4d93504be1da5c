"""Seeded corpora of inputs for the verbs past the matrix file, and the judge each must pass.

Four kinds, each a list of Cases built from a seed: command lines of every verb (`cli`), result
documents, manifests, plans, merged documents and cost tables under merge / report / compare /
costs / run --resume (`documents`), history folders under report --history (`history`) and arm
packs under arms --import --verify (`packs`). A case makes its inputs in a sandbox folder of its
own and names the command line; `judge` runs it as `python -m mlagate` in a process group of its
own with a time limit and reports its problems: a traceback, a hang, a bad input accepted, a
refusal of more than one line, or a write outside the folders the verb owns.

Used by tests/test_fuzz_inputs.py (seeded samples) and benchmarks/input_fuzz.py (the corpora).
"""

from __future__ import annotations

import io
import json
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fixtures" / "fake-matrix.yaml"
CASE_ID = "probes::m::stock::g::float32::cpu"
LIMIT_S = 60.0  # a hang guard, far above any verb's time on a loaded 2-core machine


@dataclass
class Case:
    kind: str
    name: str
    argv: list[str]  # "{d}" stands for the sandbox folder
    build: Callable[[Path], None] | None = None
    bad: bool = True  # must be refused: exit 2 (or one of codes)
    codes: tuple[int, ...] = (2,)
    owned: tuple[str, ...] = ("out", "cache")  # what the verb may write, under the sandbox
    env: dict[str, str] = field(default_factory=dict)
    skipped: str = ""  # a good case: the folder that must be skipped with a warning
    check: Callable[[Path], str] | None = None  # a problem found in what the verb wrote


@dataclass
class Verdict:
    case: Case
    rc: int | None
    seconds: float
    problems: list[str]
    stderr: str = ""


# --- what the cases are made of ------------------------------------------------------------


def result(**change) -> dict:
    row = {
        "schema": "mlagate.result/1",
        "case_id": CASE_ID,
        "suite": "probes",
        "module": "m",
        "arm": "stock",
        "verdict": "pass",
        "runner": "linux-cpu",
        "profile": "quick",
        "backend": "cpu",
        "dtype": "float32",
        "reason": "",
        "geometry": {"id": "g"},
        "started": "2026-01-01T00:00:00Z",
        "duration_s": 1.0,
        "metrics": {},
    }
    row.update(change)
    return {k: v for k, v in row.items() if v is not DROP}


DROP = object()


def manifest(**change) -> dict:
    doc = {
        "schema": "mlagate.manifest/1",
        "runner": "linux-cpu",
        "profile": "quick",
        "backend": "cpu",
        "shard": "1/1",
        "plan": "p",
        "cases": [CASE_ID],
    }
    doc.update(change)
    return doc


def write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    elif isinstance(data, str):
        path.write_text(data, encoding="utf-8", errors="surrogatepass")
    else:
        path.write_text(json.dumps(data), encoding="utf-8")


def run_folder(d: Path, name: str = "run", rows=None, with_manifest: bool = True) -> Path:
    folder = d / name
    for i, row in enumerate(rows if rows is not None else [result()]):
        write(folder / "results" / f"r{i}.json", row)
    if with_manifest:
        write(folder / "manifest.json", manifest())
    (d / "outside").mkdir(exist_ok=True)
    return folder


def fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def link(path: Path, to) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(to, path)


# --- documents ----------------------------------------------------------------------------

# (name, bad, the raw text or row of the result file)
RESULTS = [
    ("duration NaN", True, '{"duration_s": NaN}'),
    ("duration Infinity", True, '{"duration_s": Infinity}'),
    ("duration 1e308", True, {"duration_s": 1e308}),
    ("duration 1e400", True, '{"duration_s": 1e400}'),
    ("duration -1", True, {"duration_s": -1}),
    ("runner absolute", True, {"runner": "{d}/outside/evil"}),
    ("runner ../", True, {"runner": "../../outside/evil"}),
    ("runner a list", True, {"runner": ["x"]}),
    ("geometry.id a list", True, {"geometry": {"id": ["g"]}}),
    ("reason a lone surrogate", True, '{"reason": "\\ud800 x"}'),
    ("reason 2 MB", True, {"reason": "x" * 2_000_000}),
    ("case_id a list", True, {"case_id": ["a"]}),
    ("case_id with a newline", True, {"case_id": "a\nb"}),
    ("a 401-digit integer", True, '{"metrics": {"n": ' + "9" * 401 + "}}"),
    ("verdict unknown", True, {"verdict": "great"}),
    ("schema missing", True, {"schema": DROP}),
    ("schema version 9", True, {"schema": "mlagate.result/9"}),
    ("not JSON", True, b"{not json"),
    ("empty file", True, b""),
    ("not UTF-8", True, b'{"reason": "\xff"}'),
    ("nested 100,000 deep", True, b"[" * 100_000),
    ("runner missing", False, {"runner": DROP}),
    ("reason missing", False, {"reason": DROP}),
    ("profile missing", False, {"profile": DROP}),
    ("geometry missing", False, {"geometry": DROP}),
    ("started and duration missing", False, {"started": DROP, "duration_s": DROP}),
    ("metrics of 1e300", False, {"metrics": {"ratio": 1e300, "ms": -1e300}}),
    # a suite's metrics against its contract's schema (mlagate.contract.metrics; issue 37)
    (
        "marginal_cost metrics: a cache length 'abc'",
        True,
        {
            "suite": "marginal_cost",
            "metrics": {"marginal": {"L=2": {"per_T": {"abc": {"marginal_s": 0.001}}}}},
        },
    ),
    (
        "marginal_cost metrics: a list where a table belongs",
        True,
        {"suite": "marginal_cost", "metrics": {"l1_median_s": [0.002, 0.003]}},
    ),
    (
        "equivalence metrics: a list where a table belongs",
        True,
        {"suite": "equivalence", "metrics": {"errors_ulps": [1, 2]}},
    ),
    (
        "crossover metrics: a width 'wide'",
        True,
        {"suite": "crossover", "metrics": {"sweep": {"wide": {"absorbed_s": 0.1}}}},
    ),
    (
        "marginal_cost metrics well typed",
        False,
        {
            "suite": "marginal_cost",
            "metrics": {
                "marginal": {
                    "L=2": {"per_T": {"1024": {"marginal_s": 0.001, "ci_s": [0.0009, 0.0011]}}}
                },
                "l1_median_s": {"1024": 0.002},
            },
        },
    ),
    (
        "marginal_cost metrics of another version",
        False,
        {"suite": "marginal_cost", "metrics_version": 1, "metrics": {"l1_median_s": [0.002]}},
    ),
    ("a surrogate pair and markup", False, {"reason": "\U0001f600 <script>x</script>"}),
]
SPECIAL_RESULTS = [
    ("a FIFO result", lambda p: fifo(p)),
    ("a link to /dev/zero", lambda p: link(p, "/dev/zero")),
    ("a link loop", lambda p: link(p, p)),
    ("a link to a folder", lambda p: link(p, p.parent)),
]
VERBS = {  # verb -> (argv, what it owns)
    "merge": (["merge", "{d}/run", "--out", "{d}/out"], ("out",)),
    "report": (["report", "{d}/run", "--out", "{d}/out"], ("out",)),
    "compare": (["compare", "{d}/run", "{d}/run"], ()),
    "costs": (["costs", "{d}/run", "--out", "{d}/out/costs.json"], ("out",)),
}


def _result_file(text_or_row):
    def build(d: Path) -> None:
        folder = run_folder(d)
        if isinstance(text_or_row, dict):
            row = json.loads(json.dumps(result(**text_or_row)).replace("{d}", str(d)))
            write(folder / "results" / "r0.json", row)
        elif isinstance(text_or_row, bytes):
            write(folder / "results" / "r0.json", text_or_row)
        else:  # raw JSON text merged into a good row
            base = json.dumps(result())[1:-1]
            write(folder / "results" / "r0.json", "{" + base + ", " + text_or_row[1:])

    return build


def _special_result(make):
    def build(d: Path) -> None:
        folder = run_folder(d, rows=[])
        make(folder / "results" / "r0.json")

    return build


def _two_files_one_case(d: Path) -> None:
    run_folder(d, rows=[result(), result(reason="again")])


def _two_files_one_case_no_runner(d: Path) -> None:
    run_folder(d, rows=[result(runner=DROP), result(runner=DROP, reason="again")])


def _two_shards(runner: str):
    """Two shards whose result files share a name: on 8dd4a35 merge named the second copy after
    its runner."""

    def build(d: Path) -> None:
        run_folder(d)
        row = result(
            runner=runner.replace("{d}", str(d)), case_id="probes::m::other::g::float32::cpu"
        )
        write(d / "run2" / "results" / "r0.json", row)

    return build


def _logs_link(to):
    def build(d: Path) -> None:
        folder = run_folder(d)
        link(folder / "logs", to if to != "{d}" else d / "outside")

    return build


def _logs_special(d: Path) -> None:
    folder = run_folder(d)
    fifo(folder / "logs" / "pytest.log")


def _empty(d: Path) -> None:
    (d / "run").mkdir(parents=True)
    (d / "outside").mkdir()


def _manifest(change):
    def build(d: Path) -> None:
        folder = run_folder(d, with_manifest=False)
        if isinstance(change, bytes):
            write(folder / "manifest.json", change)
        else:
            write(folder / "manifest.json", manifest(**change))

    return build


def _manifest_special(make):
    def build(d: Path) -> None:
        folder = run_folder(d, with_manifest=False)
        make(folder / "manifest.json")

    return build


def _fifo_tgz(d: Path) -> None:
    (d / "outside").mkdir()
    fifo(d / "run.tgz")


def _merged(change):
    def build(d: Path) -> None:
        doc = {
            "schema": "mlagate.merged/1",
            "commit": "abc",
            "counts": {"pass": 1},
            "results": [result()],
        }
        doc.update(change)
        write(d / "run" / "merged.json", doc)
        (d / "outside").mkdir()

    return build


def _plan(text):
    def build(d: Path) -> None:
        run_folder(d)
        if text == "fifo":
            fifo(d / "plan.json")
        else:
            write(d / "plan.json", text)

    return build


def _costs(text):
    def build(d: Path) -> None:
        (d / "outside").mkdir()
        if text == "fifo":
            fifo(d / "costs.json")
        else:
            write(d / "costs.json", text)

    return build


def document_cases(n: int, seed: int = 27) -> list[Case]:
    """n cases: result files under each verb in turn, then the other documents."""
    rng = random.Random(seed)
    pool: list[Case] = []
    for verb, (argv, owned) in VERBS.items():
        for name, bad, doc in RESULTS:
            codes = (2,) if bad else (0, 1, 3)
            pool.append(
                Case("documents", f"{verb}: {name}", argv, _result_file(doc), bad, codes, owned)
            )
        for name, make in SPECIAL_RESULTS:
            pool.append(
                Case("documents", f"{verb}: {name}", argv, _special_result(make), True, (2,), owned)
            )
        pool.append(
            Case(
                "documents",
                f"{verb}: one case id in two files of one folder",
                argv,
                _two_files_one_case,
                True,
                (2,),
                owned,
            )
        )
    merge_argv, merge_owned = VERBS["merge"]
    pool.append(
        Case(
            "documents",
            "merge: one case id in two files of one folder, neither with a runner",
            merge_argv,
            _two_files_one_case_no_runner,
            True,
            (2,),
            merge_owned,
        )
    )
    for runner in ("{d}/outside/evil", "../../outside/evil"):
        pool.append(
            Case(
                "documents",
                f"merge: two shards, the second's runner {runner}",
                ["merge", "{d}/run", "{d}/run2", "--out", "{d}/out"],
                _two_shards(runner),
                True,
                (2,),
                merge_owned,
            )
        )
    for name, make in [
        ("logs/ a link to /dev/zero", _logs_link("/dev/zero")),
        ("logs/ a link to a folder outside", _logs_link("{d}")),
        ("logs/ holds a FIFO", _logs_special),
    ]:
        pool.append(Case("documents", f"merge: {name}", merge_argv, make, True, (2,), merge_owned))
    pool.append(Case("documents", "merge: of nothing", merge_argv, _empty, True, (3,), merge_owned))
    for name, change in [
        ("shard in Arabic-Indic digits", {"shard": "\u0661/\u0662"}),
        ("shard 0/2", {"shard": "0/2"}),
        ("runner ../", {"runner": "../outside"}),
        ("cases not a list", {"cases": "x"}),
        ("a case id of 2,000 characters", {"cases": ["x" * 2000]}),
        ("not JSON", b"{"),
    ]:
        pool.append(
            Case(
                "documents",
                f"merge: manifest {name}",
                merge_argv,
                _manifest(change),
                True,
                (2,),
                merge_owned,
            )
        )
        pool.append(
            Case(
                "documents",
                f"resume: manifest {name}",
                ["run", "--matrix", str(FAKE), "--resume", "{d}/run"],
                _manifest(change),
                True,
                (2,),
                ("run", "cache"),
            )
        )
    for name, make in [
        ("a FIFO", fifo),
        ("a link to /dev/zero", lambda p: link(p, "/dev/zero")),
        ("a folder", lambda p: p.mkdir(parents=True)),
        ("a link loop", lambda p: link(p, p)),
    ]:
        for verb, argv in [
            ("merge", merge_argv),
            ("resume", ["run", "--matrix", str(FAKE), "--resume", "{d}/run"]),
        ]:
            owned = merge_owned if verb == "merge" else ("run", "cache")
            pool.append(
                Case(
                    "documents",
                    f"{verb}: manifest {name}",
                    argv,
                    _manifest_special(make),
                    True,
                    (2,),
                    owned,
                )
            )
    for name, argv in [
        ("report", ["report", "{d}/run.tgz", "--out", "{d}/out"]),
        ("compare", ["compare", "{d}/run.tgz", "{d}/run.tgz"]),
    ]:
        pool.append(
            Case("documents", f"{name}: a FIFO named *.tgz", argv, _fifo_tgz, True, (2,), ("out",))
        )
    for name, change in [
        ("commit ..", {"commit": ".."}),
        ("commit javascript:", {"commit": "javascript:alert(1)"}),
        ("a result with duration 1e308", {"results": [result(duration_s=1e308)]}),
        ("counts negative", {"counts": {"pass": -1}}),
    ]:
        pool.append(
            Case(
                "documents",
                f"report: merged {name}",
                ["report", "{d}/run/merged.json", "--out", "{d}/out"],
                _merged(change),
                True,
                (2,),
                ("out",),
            )
        )
    for name, text in [
        ("a FIFO", "fifo"),
        (
            "runner ../",
            {
                "schema": "mlagate.plan/1",
                "jobs": [{"runner": "../x", "shard": "1/1", "case_ids": []}],
            },
        ),
        (
            "case_ids of numbers",
            {
                "schema": "mlagate.plan/1",
                "jobs": [{"runner": "r", "shard": "1/1", "case_ids": [1]}],
            },
        ),
    ]:
        pool.append(
            Case(
                "documents",
                f"merge --plan: {name}",
                [*merge_argv, "--plan", "{d}/plan.json"],
                _plan(text),
                True,
                (2,),
                merge_owned,
            )
        )
    for name, text in [
        ("a FIFO", "fifo"),
        ("default NaN", '{"schema": "mlagate.costs/1", "suites": {"probes": {"default": NaN}}}'),
        ("default 1e400", '{"schema": "mlagate.costs/1", "suites": {"p": {"default": 1e400}}}'),
        ("default 1e308", {"schema": "mlagate.costs/1", "suites": {"p": {"default": 1e308}}}),
    ]:
        pool.append(
            Case(
                "documents",
                f"plan --costs: {name}",
                ["plan", "--matrix", str(FAKE), "--costs", "{d}/costs.json"],
                _costs(text),
                True,
                (2,),
                (),
            )
        )
    return _sample(rng, pool, n)


def _sample(rng: random.Random, pool: list[Case], n: int) -> list[Case]:
    """n cases of the pool (all of it when n is larger), the same for a seed."""
    if n >= len(pool):
        return list(pool)
    return sorted(rng.sample(pool, n), key=pool.index)


# --- the judge ----------------------------------------------------------------------------


def _tree(d: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(d):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            same = stat.S_ISDIR(st.st_mode)  # a folder changes when an owned child is made
            out[os.path.relpath(p, d)] = (
                (st.st_mode,) if same else (st.st_mode, st.st_size, st.st_mtime_ns)
            )
    return out


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    resource.setrlimit(resource.RLIMIT_FSIZE, (512 << 20, 512 << 20))


def judge(case: Case, sandbox: Path, limit_s: float = LIMIT_S, module: str = "mlagate") -> Verdict:
    """Run one case in a fresh sandbox: its problems (an empty list when it is handled)."""
    if sandbox.exists():
        shutil.rmtree(sandbox)
    sandbox.mkdir(parents=True)
    if case.build:
        case.build(sandbox)
    before = _tree(sandbox)
    argv = [
        os.fsencode(a.replace("{d}", str(sandbox)))
        if isinstance(a, str)
        else a.replace(b"{d}", os.fsencode(sandbox))
        for a in case.argv
    ]
    env = {**os.environ, "MLAGATE_CACHE": str(sandbox / "cache"), **case.env}
    env = {k: v.replace("{d}", str(sandbox)) for k, v in env.items()}
    if "GITHUB_SHA" not in case.env:
        env.pop("GITHUB_SHA", None)  # a CI job's own commit must not decide a case
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *argv],
        cwd=sandbox,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_limits,
    )
    try:
        out, err = proc.communicate(timeout=limit_s)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = None
    seconds = time.monotonic() - t0
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything it left behind
    except ProcessLookupError:
        pass
    stderr = err.decode("utf-8", "replace")
    problems = _problems(case, rc, stderr, out.decode("utf-8", "replace"))
    if not problems and case.check:
        problems = [p for p in [case.check(sandbox)] if p]
    after = _tree(sandbox)
    owned = (*case.owned, "cache")
    inside = tuple(o + os.sep for o in owned)  # "out/x" is the verb's, "outside/x" is not
    for rel in sorted(set(after) | set(before)):
        if before.get(rel) != after.get(rel) and not rel.startswith(inside) and rel not in owned:
            problems.append(f"wrote outside: {rel}")
            break
    return Verdict(case, rc, seconds, problems, stderr)


def _problems(case: Case, rc: int | None, stderr: str, stdout: str) -> list[str]:
    if rc is None:
        return ["hang"]
    if "Traceback (most recent call last)" in stderr or rc < 0:
        return [f"traceback (exit {rc}): {stderr.strip().splitlines()[-1:]}"]
    lines = [ln for ln in stderr.splitlines() if ln.strip() and "warning:" not in ln]
    if case.bad and rc not in case.codes:
        return [f"bad input accepted (exit {rc})"]
    if not case.bad and rc not in case.codes:
        return [f"good input refused (exit {rc}): {lines[-1:]}"]
    if rc == 2 and (len(lines) != 1 or not lines[0].startswith("mlagate: error: ")):
        return [f"refusal not one line: {lines[:3]}"]
    if case.skipped and f"{case.skipped} skipped" not in stderr:
        return [f"bad input accepted (no warning that {case.skipped} was skipped)"]
    return []


def tarball(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()
