"""mlagate calibrate --store: an accepted calibration is stored for the machine class its results
were measured on, and a run with --reuse STORE on that class uses it where the matrix says
`uncalibrated`; another class's, a tampered one or none leaves the case invalid, naming the
command. On the fake runtime's equivalence suite (its budgets made uncalibrated for cpu). The fake
runtime rounds finer than calibrate's least floor (its proposal is refused: the refused test), so
the accepted calibrations come from its results with a coarser materialised p99 (`coarse`): the
bounds then come from its measured worst errors, and the later run is judged by them."""

import json
import shutil
import subprocess

import pytest

from .conftest import cli, uncalibrated_correctness

SELECT = ("--suite", "equivalence", "--module", "fake/fixed", "--arm", "fake-stock")


@pytest.fixture
def origin(tmp_path) -> str:
    """A local bare origin serving partial fetches (as tests/test_store.py's)."""
    bare = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "config", "uploadpack.allowFilter", "true"], check=True)
    return f"git+file://{bare}"


@pytest.fixture
def uncalibrated(tmp_path):
    """A copy of the fake correctness matrix whose cpu equivalence budgets are uncalibrated, and
    one run of its equivalence case (invalid, its errors measured)."""
    matrix = uncalibrated_correctness(tmp_path)
    out = tmp_path / "aa"
    proc = cli("run", "--matrix", matrix, *SELECT, "--out", out, cache=tmp_path / "cache")
    (row,) = rows(out)
    assert row["verdict"] == "invalid" and row["tolerance_from"] == "matrix", proc.stderr
    return matrix, out


def rows(out) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))]


def calibrate(matrix, store, *dirs, out):
    return cli("calibrate", *dirs, "--matrix", matrix, "--runner", "linux-cpu", "--out", out,
               "--store", store)  # fmt: skip


def run(matrix, store, out, cache):
    return cli("run", "--matrix", matrix, *SELECT, "--reuse", store, "--out", out, cache=cache)


def edited(src, dst, edit):
    shutil.copytree(src, dst)
    for path in (dst / "results").glob("*.json"):
        row = json.loads(path.read_text())
        edit(row)
        path.write_text(json.dumps(row))
    return dst


def coarse(src, dst):
    """A copy of a run's results whose materialised path rounds to 64 ULPs at p99."""

    def edit(row):
        for table in row["metrics"]["errors_ulps"].values():
            table["materialised"]["p99"] = 64.0

    return edited(src, dst, edit)


def reclass(src, dst, class_id: str | None):
    """A copy of a run's results, as measured on another machine class (None: on none)."""

    def edit(row):
        if class_id is None:
            row.pop("machine_class")
        else:
            row["machine_class"]["id"] = class_id

    return edited(src, dst, edit)


def test_a_stored_calibration_decides_the_case_on_its_class_through_a_git_store(
    uncalibrated, origin, tmp_path
):
    matrix, aa = uncalibrated
    (measured,) = rows(aa)
    mc = measured["machine_class"]["id"]
    proc = calibrate(matrix, origin, coarse(aa, tmp_path / "coarse"), out=tmp_path / "c")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"stored the calibration of {mc} (4 bounds)" in proc.stdout
    bare = origin.removeprefix("git+file://")
    log = subprocess.run(["git", "--git-dir", bare, "log", "--format=%s", "mlagate-results"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert log.splitlines() == [f"mlagate: calibration of {mc}"]  # one commit
    shown = subprocess.run(
        ["git", "--git-dir", bare, "show", f"mlagate-results:calibrations/{mc}.json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    doc = json.loads(shown)
    assert doc["machine_class"] == measured["machine_class"] and doc["runs"] == [measured["run_id"]]
    paths = {tuple(b["path"]) for b in doc["bounds"]}
    assert ("budgets", "float32", "cpu", "floor_ulps") in paths
    # a second runner of the class, its own empty cache: the case is decided, not invalid
    proc = run(matrix, origin, tmp_path / "b", tmp_path / "cache-b")
    (row,) = rows(tmp_path / "b")
    assert row["verdict"] in ("pass", "fail"), row["reason"]
    assert row["tolerance_from"] == f"calibration {mc}"
    assert f"bounds from the calibration {mc}" in proc.stderr


def test_a_calibration_of_another_class_is_never_used(uncalibrated, tmp_path):
    matrix, aa = uncalibrated
    other = reclass(coarse(aa, tmp_path / "coarse"), tmp_path / "other", "mc-bbbbbbbbbbbb")
    store = tmp_path / "store"
    proc = calibrate(matrix, store, other, out=tmp_path / "c")
    assert proc.returncode == 0 and (store / "calibrations" / "mc-bbbbbbbbbbbb.json").is_file()
    run(matrix, store, tmp_path / "b", tmp_path / "cache")
    (row,) = rows(tmp_path / "b")
    assert row["verdict"] == "invalid" and row["tolerance_from"] == "matrix"
    assert "run mlagate calibrate first" in row["reason"] and "--store STORE" in row["reason"]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda doc: doc.pop("runs"),
        lambda doc: doc["bounds"][0].update(value=-1),
        lambda doc: doc["machine_class"].update(id="mc-bbbbbbbbbbbb"),  # another class's
        lambda doc: [b.update(value=0) for b in doc["bounds"] if b["gate"].endswith("max_ulps")],
    ],
    ids=["schema", "negative", "another-class", "out-of-bounds"],
)
def test_a_tampered_calibration_is_one_line_and_ignored(uncalibrated, tmp_path, tamper):
    matrix, aa = uncalibrated
    store = tmp_path / "store"
    assert calibrate(matrix, store, coarse(aa, tmp_path / "x"), out=tmp_path / "c").returncode == 0
    (path,) = (store / "calibrations").glob("mc-*.json")
    doc = json.loads(path.read_text())
    tamper(doc)
    path.write_text(json.dumps(doc))
    proc = run(matrix, store, tmp_path / "b", tmp_path / "cache")
    (row,) = rows(tmp_path / "b")
    assert row["verdict"] == "invalid" and row["tolerance_from"] == "matrix", row["reason"]
    said = [line for line in proc.stderr.splitlines() if path.name in line]
    assert len(said) == 1 and said[0].endswith(": ignored"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_results_of_two_classes_or_none_are_one_line_and_exit_2(uncalibrated, tmp_path):
    matrix, aa = uncalibrated
    other = reclass(aa, tmp_path / "other", "mc-bbbbbbbbbbbb")
    store = tmp_path / "store"
    proc = calibrate(matrix, store, aa, other, out=tmp_path / "c")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "come from 2 machine classes" in proc.stderr
    none = reclass(aa, tmp_path / "none", None)
    proc = calibrate(matrix, store, none, out=tmp_path / "c2")
    assert proc.returncode == 2 and "name no machine class" in proc.stderr
    assert not store.exists()


def test_a_refused_calibration_stores_nothing(uncalibrated, tmp_path):
    matrix, aa = uncalibrated
    store = tmp_path / "store"
    proc = calibrate(matrix, store, aa, out=tmp_path / "c")  # the fake's own fine rounding
    assert proc.returncode == 1 and "refused" in proc.stdout, proc.stdout + proc.stderr
    assert f"nothing stored in {store}" in proc.stdout
    assert not (store / "calibrations").exists()
