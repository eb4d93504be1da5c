"""A runtime checkout as the gate's subject: `mlagate run --head PATH [--base REF]`.

The checkout at PATH (its working tree, as it is) becomes the path arm `head` (role head); the
commit where it left REF (git merge-base) becomes the path arm `base` (role base), head's
baseline. The modules are the MLA attention classes that discovery finds in head
(mlagate.scan.discovery): each runs as the registered module it matches, wherever in the tree it
is; the unknown ones are one error naming the command that writes their entries. The run's matrix is
written to OUT/headbase/matrix.yaml (with base's tree beside it) so every replay command works;
errors about it name the user's matrix. Every case runs on head and on base, and head's outcome
is relative to base's verdict (mlagate.headrun); the paired suites compare head with base.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from mlagate import headrun
from mlagate.gate import outdir
from mlagate.matrix import Matrix, load
from mlagate.matrix.model import Runtime
from mlagate.modulefiles import module_file
from mlagate.scan.discovery import Found, extend, known_modules, runtime_of

HEAD, BASE = "head", "base"


class HeadBaseError(ValueError):
    """A --head / --base problem; one line."""


@dataclass(frozen=True)
class HeadBase:
    matrix: Path  # the derived matrix file
    modules: tuple[str, ...]  # matrix module ids found in head
    runtime: str
    base_commit: str
    user_matrix: Path  # the matrix the user gave, named in errors
    head_commit: str = ""
    base_label: str = "base"  # how the summary names base ("main")


def _git(path: Path, *args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, timeout=120
        )
    except FileNotFoundError:
        raise HeadBaseError("--head: git is not installed") from None
    if proc.returncode != 0:
        first = next(
            (ln for ln in proc.stderr.splitlines() if ln.strip()), f"exit {proc.returncode}"
        )
        raise HeadBaseError(f"--head {path}: git {' '.join(args)}: {first.strip()}")
    return proc.stdout.strip()


def default_base(path: Path) -> str:
    """The first of origin/HEAD, origin/main and main that names a commit (else main)."""
    for ref in ("origin/HEAD", "origin/main", "main"):
        try:
            _git(path, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
            return ref
        except HeadBaseError:
            continue
    return "main"


def export_base(head: Path, ref: str, dest: Path, package: str) -> str:
    """Write the tree of merge-base(HEAD, ref) to dest; return that commit (export_tree)."""
    commit = _git(head, "merge-base", "HEAD", ref)
    export_tree(head, commit, dest, package)
    return commit


def export_tree(head: Path, commit: str, dest: Path, package: str) -> None:
    """Write the tree of a commit of the checkout head to dest (git archive). A link pointing
    outside the tree is left out (one warning line), unless it lies in the runtime's package:
    then the commit could not be imported as committed, a one-line error."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as tar:
        proc = subprocess.run(
            ["git", "-C", str(head), "archive", "--format=tar", commit],
            stdout=tar,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
            raise HeadBaseError(f"--head {head}: git archive {commit}: {first}")
        tar.seek(0)
        left_out: list[str] = []

        def member(m: tarfile.TarInfo, where: str) -> tarfile.TarInfo | None:
            try:
                return tarfile.data_filter(m, where)
            except tarfile.FilterError as exc:
                if not (m.issym() or m.islnk()):
                    raise HeadBaseError(
                        f"--head {head}: commit {commit[:12]}: {m.name}: cannot be written as "
                        f"base's tree ({type(exc).__name__}: {exc})"
                    ) from None
                left_out.append(m.name)
                return None

        with tarfile.open(fileobj=tar) as archive:
            archive.extractall(dest, filter=member)
    inside = [n for n in left_out if n == package or n.startswith(f"{package}/")]
    if inside:
        raise HeadBaseError(
            f"--head {head}: commit {commit[:12]}: {inside[0]} links outside the checkout, inside "
            f"the runtime's package {package}/ (base could not be imported as committed)"
        )
    if left_out:
        print(
            f"mlagate: warning: base's tree leaves out {len(left_out)} link(s) pointing outside "
            f"the checkout: {', '.join(left_out[:5])}",
            file=sys.stderr,
        )


def _classes(tree: Path, import_path: str) -> set[str]:
    """The classes a module of tree defines (none when the module is not there or does not
    parse)."""
    path = module_file(tree, import_path)
    if path is None:
        return set()
    try:
        parsed = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return set()
    return {n.name for n in ast.walk(parsed) if isinstance(n, ast.ClassDef)}


def _carried(matrix: Matrix, kept: dict, modules: dict[str, Found]) -> list[dict]:
    """The known findings that hold for base and head: those of the stock arms a fixed arm is
    compared with (its `baseline`: the release main stands for; every stock arm where none is
    named) on the kept modules (for a module that carries another's entry, a vendored copy: on
    that one), named for base (a finding of the release is one of main's); a `skip` among them
    also for head (what cannot be measured on the release cannot on the change). The first of
    two for the same case wins (matrix order). An older release's own finding (mlx-lm 0.31.3's)
    is not main's."""
    stock = _stock(matrix)
    carriers: dict[str, list[str]] = {}
    for mid, found in modules.items():
        carriers.setdefault(found.reuses or mid, []).append(mid)
    out: dict[tuple, dict] = {}
    for e, mid in ((x, m) for x in matrix.expectations for m in carriers.get(x.module, ())):
        if e.arm not in stock or mid not in kept:
            continue
        for arm in (BASE, HEAD) if e.verdict == "skip" else (BASE,):
            if arm == BASE and BASE not in kept[mid]["arms"]:
                continue
            entry = {"suite": e.suite, "module": mid, "arm": arm}
            entry |= {"geometry": e.geometry} if e.geometry else {}
            entry |= {"backend": e.backend} if e.backend else {}
            entry |= {"verdict": e.verdict, "reason": e.reason}
            entry |= {"kind": list(e.kinds)} if e.kinds else {}
            entry |= {"link": e.link} if e.link else {}
            out.setdefault((e.suite, mid, arm, e.geometry, e.backend), entry)
    return list(out.values())


def _unservable(raw: list, stock: set[str], kept: dict, modules: dict[str, Found]) -> list:
    """The unservable declarations on the kept modules (one naming a module also on the kept
    modules that carry its entry); one naming arms holds for base and head when it names a
    stock arm (a release's declaration is main's, and what main cannot serve head need not
    serve either: head serving it and equal is `finding_fixed`, fixed by this change), and
    goes otherwise."""
    carriers: dict[str, list[str]] = {}
    for mid, found in modules.items():
        carriers.setdefault(found.reuses or mid, []).append(mid)
    out = []
    for entry in raw:
        entry = dict(entry)
        if entry.get("modules") is not None:
            named = (k for m in entry["modules"] for k in carriers.get(m, ()))
            entry["modules"] = [k for k in named if k in kept]
            if not entry["modules"]:
                continue
        if entry.get("arms") is not None:
            if not stock & set(entry["arms"]):
                continue
            entry["arms"] = [BASE, HEAD]
        out.append(entry)
    return out


def _stock(matrix: Matrix) -> set[str]:
    stock = {a.id for a in matrix.arms.values() if a.role == "stock"}
    return {a.baseline for a in matrix.arms.values() if a.baseline in stock} or stock


def derive(
    matrix: Matrix, runtime: Runtime, head: Path, base_tree: Path, modules: dict[str, Found]
) -> dict:
    """The matrix's own document with only the arms head and base and the modules found in head
    (on base too when base defines the class, else on head only: a new case).

    Whatever names a dropped module or arm goes: checkpoints and suites' module lists keep the
    kept modules, known findings are carried over by _carried (unservable declarations by
    _unservable), argued equivalent mutants (which
    name arms of the matrix) are dropped. A suite's own file is named by its absolute path, so
    the derived file, written elsewhere, finds it."""
    raw = yaml.safe_load(matrix.path.read_text(encoding="utf-8"))
    extend(raw, matrix, runtime, modules)  # a derived runtime, modules found at other paths
    raw["arms"] = {
        HEAD: {"runtime": runtime.id, "path": str(head), "role": HEAD, "baseline": BASE},
        BASE: {"runtime": runtime.id, "path": str(base_tree), "role": BASE},
    }
    kept = {}
    for mid, found in modules.items():
        cls = found.attention
        entry = {k: v for k, v in raw["modules"][mid].items() if k not in ("arms", "overrides")}
        in_base = cls in _classes(base_tree, found.import_path)
        kept[mid] = {**entry, "attention": cls, "arms": [HEAD, BASE] if in_base else [HEAD]}
    raw["modules"] = kept
    raw["checkpoints"] = {
        k: v for k, v in (raw.get("checkpoints") or {}).items() if v.get("module") in kept
    }
    if not raw["checkpoints"]:
        raw.pop("checkpoints")
    for sid, suite in (raw.get("suites") or {}).items():
        if isinstance(suite, dict) and suite.get("modules") is not None:
            suite["modules"] = [m for m in suite["modules"] if m in kept]
        if isinstance(suite, dict) and suite.get("file") is not None:
            suite["file"] = str(matrix.suites[sid].path)
    raw.pop("mutants", None)
    raw.pop("expectations", None)
    if raw.get("unservable"):
        raw["unservable"] = _unservable(raw["unservable"], _stock(matrix), kept, modules)
    carried = _carried(matrix, kept, modules)
    if carried:
        raw["expectations"] = carried
    return raw


def default_out(head: Path) -> Path:
    """reports/head under the current folder, or a folder of the system's temporary one when
    that would lie inside head (`mlagate run --head .`)."""
    local = Path("reports/head").resolve()
    if not local.is_relative_to(head.resolve()):
        return Path("reports/head")
    return Path(tempfile.gettempdir()) / f"mlagate-head-{head.resolve().name}"


def user_message(text: str, hb: HeadBase) -> str:
    """An error about the derived matrix, told about the user's: its file named instead (a line
    number of the derived file means nothing in the user's, so it goes)."""
    derived = re.escape(str(hb.matrix))
    return re.sub(derived + r"(:\d+)?", f"{hb.user_matrix} (as derived for --head)", text)


def base_label(head: Path, ref: str, commit: str) -> str:
    """How the summary names base: the branch given (less origin/), else a branch that points at
    the merge base (a pull request's base commit is its branch's tip), else the commit's start."""
    if not re.fullmatch(r"[0-9a-f]{7,64}", ref):
        return ref.removeprefix("origin/")
    names = _git(
        head, "for-each-ref", "--points-at", commit, "--format=%(refname:short)",
        "refs/heads", "refs/remotes",
    ).split()  # fmt: skip
    names = sorted(
        {n.removeprefix("origin/") for n in names if not n.endswith("HEAD")},
        key=lambda n: (n not in ("main", "master"), n),
    )
    return names[0] if names else f"base {commit[:12]}"


def head_commit(head: Path) -> str:
    """HEAD's commit, with "+edits" when the working tree differs from it (what is run is the
    working tree)."""
    commit = _git(head, "rev-parse", "HEAD")
    return commit + (
        "+edits" if _git(head, "status", "--porcelain", "--untracked-files=no") else ""
    )


def prepare(
    matrix_path: Path, head: Path, base: str | None, out: Path, strict: bool = False
) -> HeadBase:
    """Write OUT/headbase/matrix.yaml (and base's tree) for a run of head against its merge base,
    and OUT/headbase/head-run.json: what was compared with what (mlagate.headrun)."""
    head = head.resolve()
    if not head.is_dir():
        raise HeadBaseError(f"--head {head}: no such directory")
    matrix = load(matrix_path)
    runtime = runtime_of(matrix, head)
    modules = known_modules(matrix, runtime, head)
    where = (out / "headbase").resolve()
    if where.is_relative_to(head):
        raise HeadBaseError(
            f"--out {out}: lies inside --head {head}; choose a folder outside the checkout "
            "(base's tree written there would be read as part of head)"
        )
    ref = base or default_base(head)
    with outdir.hold(out):  # base's tree is rewritten: never under another run
        base_tree = where / "base"
        if base_tree.exists():
            shutil.rmtree(base_tree)
        commit = export_base(head, ref, base_tree, runtime.package)
        doc = derive(matrix, runtime, head, base_tree, modules)
        target = where / "matrix.yaml"
        target.write_text(
            f"# written by mlagate run --head {head} --base {ref} (merge base {commit}) from "
            f"{matrix.path}\n" + yaml.safe_dump(doc, sort_keys=False)
        )
    hb = HeadBase(
        target, tuple(sorted(modules)), runtime.id, commit, matrix.path, head_commit(head),
        base_label(head, ref, commit),
    )  # fmt: skip
    headrun.write_record(where, hb, str(head), ref, strict)
    return hb
