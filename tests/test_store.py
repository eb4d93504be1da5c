"""The result store (mlagate.store): the folder store's layouts and calibrations by machine
class; the git store (a local bare origin, real git): partial fetch, one commit per publish,
racing writers, a branch that is not a store, an unreachable remote."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from mlagate.gate.reuse import keys
from mlagate.results import Result
from mlagate.store import StoreError, entries, open_store

CASE = {
    "id": "probes::fake/good::fake-stock::tiny::float32::cpu",
    "suite": "probes",
    "module": "fake/good",
    "arm": "fake-stock",
    "geometry": "tiny",
    "dtype": "float32",
    "backend": "cpu",
    "profile": "quick",
    "runner": "linux-cpu",
}
CLASS = "mc-0123456789ab"
CALIBRATION = {
    "schema": "mlagate.class-calibration/1",
    "machine_class": {"id": CLASS, "parts": {"chip": "Apple M2 Pro", "backend": "metal"}},
    "runner": "m2",
    "backend": "metal",
    "bounds": [
        {"suite": "l1_parity", "gate": "tolerance", "path": ["tolerance", "metal"], "value": 0.03}
    ],
    "runs": ["r1"],
    "stored": "2025-01-01T00:00:00Z",
}


def key_of(n: int) -> keys.Key:
    parts = {p: keys.digest([p, n]) for p in ("runtime", "suite", "harness", "matrix", "mlx")}
    return keys.Key(keys.combine(parts), parts)


def passed() -> dict:
    return Result(case=CASE, verdict="pass", reason="all gates held").to_json()


def test_folder_store_fans_out_and_reads_the_flat_layout(tmp_path):
    st = open_store(str(tmp_path / "s"), write=True)
    k1, k2 = key_of(1), key_of(2)
    path = st.put(k1, passed(), "c1")
    assert path == tmp_path / "s" / "results" / k1.digest[:2] / f"{k1.digest}.json"
    assert st.get(k1)["result"]["verdict"] == "pass"
    flat = tmp_path / "s" / "results" / f"{k2.digest}.json"  # written before the fan-out
    flat.write_bytes(entries.encode(entries.make(k2, passed(), "c0")))
    assert st.get(k2)["from"]["commit"] == "c0" and st.get(key_of(3)) is None
    assert sorted(k for k, _ in st.files()) == sorted([k1.digest, k2.digest])
    assert st.publish().commits == 0 and not st.ignored


def test_calibrations_are_stored_per_machine_class(tmp_path):
    st = open_store(str(tmp_path / "s"), write=True)
    assert st.get_calibration(CLASS) is None
    st.put_calibration(CLASS, CALIBRATION)
    assert st.get_calibration(CLASS) == CALIBRATION
    assert st.get_calibration("mc-bbbbbbbbbbbb") is None  # another class: not its calibration
    with pytest.raises(StoreError, match="runner"):
        st.put_calibration(CLASS, {**CALIBRATION, "runner": None})  # not a calibration document
    with pytest.raises(StoreError, match="a calibration of mc-0123456789ab, not of mc-b"):
        st.put_calibration("mc-bbbbbbbbbbbb", CALIBRATION)  # under another class's name
    with pytest.raises(StoreError, match="not a name"):
        st.put_calibration("../escape", CALIBRATION)
    bad = tmp_path / "s" / "calibrations" / "mc-cccccccccccc.json"
    bad.write_text('{"schema": "mlagate.class-calibration/1"}')
    with pytest.raises(StoreError, match="mc-cccccccccccc.json.*missing key"):
        st.get_calibration("mc-cccccccccccc")
    moved = tmp_path / "s" / "calibrations" / "mc-dddddddddddd.json"
    moved.write_text(json.dumps(CALIBRATION))  # another class's, copied under this name
    with pytest.raises(StoreError, match="a calibration of mc-0123456789ab, not of mc-d"):
        st.get_calibration("mc-dddddddddddd")


def test_a_file_is_not_a_folder_store(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(StoreError, match="is not a folder"):
        open_store(str(tmp_path / "f"), write=False)


def git(*args, cwd=None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


@pytest.fixture
def origin(tmp_path) -> str:
    """A local bare origin serving partial fetches (as GitHub and GitLab do)."""
    bare = tmp_path / "origin.git"
    git("init", "-q", "--bare", str(bare))
    git("-C", str(bare), "config", "uploadpack.allowFilter", "true")
    return f"git+file://{bare}"


def tip(spec: str) -> str:
    return git("--git-dir", spec.removeprefix("git+file://"), "rev-parse", "mlagate-results")


def blobs(store) -> int:
    out = git("--git-dir", store.repo, "cat-file", "--batch-all-objects", "--batch-check")
    return sum(" blob " in line for line in out.splitlines())


def test_git_store_publishes_one_commit_and_fetches_only_the_keys_asked(origin):
    w = open_store(origin, write=True)
    assert w.get(key_of(0)) is None and w.publish().commits == 0  # no branch yet: nothing
    for n in range(6):
        w.put(key_of(n), passed(), "c1")
    done = w.publish()
    assert (done.pushed, done.commits, done.tries) == (6, 1, 1)
    bare = origin.removeprefix("git+file://")
    assert git("--git-dir", bare, "rev-list", "--count", "mlagate-results") == "1"
    r = open_store(origin, write=False)
    r.prefetch([key_of(1), key_of(4), key_of(99)])
    assert blobs(r) == 2  # two entries' blobs, not the store's
    assert r.get(key_of(1))["from"]["commit"] == "c1" and r.get(key_of(99)) is None


def test_a_read_only_run_leaves_the_ref_unchanged(origin):
    w = open_store(origin, write=True)
    w.put(key_of(0), passed(), "c1")
    w.publish()
    before = tip(origin)
    r = open_store(origin, write=False)
    assert r.put(key_of(1), passed(), "pr") is None
    assert r.publish().commits == 0 and tip(origin) == before
    with pytest.raises(StoreError, match="read-only"):
        r.put_calibration(CLASS, CALIBRATION)


def test_racing_writers_both_land(origin):
    first = open_store(origin, write=True)
    first.put(key_of(0), passed(), "c0")
    first.publish()
    a, b = open_store(origin, write=True), open_store(origin, write=True)  # the same tip
    for n in range(1, 4):
        a.put(key_of(n), passed(), "a")
    for n in range(4, 6):
        b.put(key_of(n), passed(), "b")
    assert a.publish().tries == 1
    late = b.publish()  # rejected once: fetched, rebuilt on a's commit, pushed
    assert (late.pushed, late.tries) == (2, 2)
    r = open_store(origin, write=False)
    assert sorted(r.present) == sorted(key_of(n).digest for n in range(6))


def test_an_altered_entry_is_refused_naming_its_key_and_replaced(origin, tmp_path, capsys):
    w = open_store(origin, write=True)
    w.put(key_of(0), passed(), "c1")
    w.publish()
    clone = tmp_path / "clone"
    git("clone", "-q", "-b", "mlagate-results", origin.removeprefix("git+"), str(clone))
    path = clone / entries.entry_path(key_of(0).digest)
    path.write_text(path.read_text().replace('"verdict":"pass"', '"verdict":"fail"'))
    git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qam", "forged", cwd=clone)
    git("push", "-q", "origin", "mlagate-results", cwd=clone)
    r = open_store(origin, write=True)
    assert r.get(key_of(0)) is None
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and key_of(0).digest in line and "altered" in line
    r.put(key_of(0), passed(), "c2")  # measured again
    assert r.publish().pushed == 1  # the refused entry is replaced; a sound one never is
    assert open_store(origin, write=False).get(key_of(0))["from"]["commit"] == "c2"


def test_a_branch_that_is_no_store_and_an_unreachable_remote_are_one_line(origin, tmp_path):
    clone = tmp_path / "other"
    git("init", "-q", "-b", "mlagate-results", str(clone))
    (clone / "README").write_text("not a store")
    git("add", "README", cwd=clone)
    git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "x", cwd=clone)
    git("push", "-q", origin.removeprefix("git+"), "mlagate-results", cwd=clone)
    with pytest.raises(StoreError, match="branch mlagate-results is not a mlagate store"):
        open_store(origin, write=False)
    with pytest.raises(StoreError, match="cannot reach the remote"):
        open_store(f"git+file://{tmp_path}/missing.git", write=False)
    with pytest.raises(StoreError, match="expected git"):
        open_store(origin + "#bad..name", write=False)


def test_a_second_cache_against_the_same_remote_measures_nothing_the_first_decided(
    origin, fake_matrix, tmp_path, run_cli
):
    """Done when (issue 44): one runner's run, then the same selection on an empty cache."""
    base = ("run", "--matrix", fake_matrix, "--reuse", origin)
    first = run_cli(*base, "--out", tmp_path / "a", cache=tmp_path / "cache-a")
    assert "published 6 entries in one commit" in first.stderr, first.stderr
    decided = {
        r["case_id"]
        for r in map(json.loads, map(Path.read_text, (tmp_path / "a" / "results").glob("*.json")))
        if r["verdict"] in ("pass", "fail")
    }
    before = tip(origin)
    second = run_cli(*base, "--reuse-read-only", "--out", tmp_path / "b", cache=tmp_path / "c-b")
    rows = [json.loads(p.read_text()) for p in (tmp_path / "b" / "results").glob("*.json")]
    measured = {r["case_id"] for r in rows if not r.get("reused")}
    assert len(decided) == 6 and not measured & decided, second.stderr
    assert "reuse: 6 of 8 cases taken from" in second.stderr and tip(origin) == before
    assert first.returncode == second.returncode == 1  # the fake matrix's known red case


@pytest.mark.parametrize("spec", ["git+file:///nonexistent/store.git", "git+file:///x#a..b"])
def test_a_bad_remote_is_one_line_and_exit_2(spec, fake_matrix, tmp_path, run_cli):
    got = run_cli("run", "--matrix", fake_matrix, "--reuse", spec, "--out", tmp_path / "o",
                  cache=tmp_path / "cache")  # fmt: skip
    assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert "Traceback" not in got.stderr and spec in got.stderr


def test_store_verbs_stats_push_prune_verify(origin, fake_matrix, tmp_path, run_cli):
    folder = tmp_path / "s"
    cache = tmp_path / "cache"
    run_cli("run", "--matrix", fake_matrix, "--reuse", folder, "--out", tmp_path / "o", cache=cache)
    stats = run_cli("store", "stats", folder)
    assert stats.returncode == 0 and stats.stdout.startswith(f"{folder}: 6 entries, "), stats
    assert re.search(r"machine class mc-[0-9a-f]{12}: 6\n", stats.stdout), stats.stdout
    assert "suite probes: 6" in stats.stdout
    pushed = run_cli("store", "push", folder, origin)
    assert "6 sound entries sent" in pushed.stdout and "published 6 entries" in pushed.stdout
    assert run_cli("store", "stats", origin).stdout.startswith(f"{origin}: 6 entries")

    old = {"stored": "2020-01-01T00:00:00Z"}
    for path in (folder / "results").glob("*/*.json"):  # every entry a year old
        entry = json.loads(path.read_text())
        path.write_bytes(entries.encode({**entry, "from": {**entry["from"], **old}}))
    foreign = entries.make(key_of(1), passed(), "c0")
    st = open_store(str(folder), write=True)
    foreign["from"] |= old
    st._write(st.path(key_of(1).digest), entries.encode(foreign))
    pruned = run_cli("store", "prune", folder, "--keep-days", "30", "--matrix", fake_matrix,
                     cache=cache)  # fmt: skip
    assert pruned.returncode == 0, pruned.stderr
    assert "dropped 1 entries, kept 6 (6 of them only because the plan" in pruned.stdout
    assert st.get(key_of(1)) is None
    assert run_cli("store", "prune", folder).returncode == 2  # neither --keep-days nor commits

    assert run_cli("store", "verify", origin).returncode == 0
    path = next((folder / "results").glob("*/*.json"))
    data = json.loads(path.read_text())
    data["result"]["verdict"] = {"pass": "fail", "fail": "pass"}[data["result"]["verdict"]]
    path.write_text(json.dumps(data))
    bad = run_cli("store", "verify", folder)
    assert bad.returncode == 1 and path.stem in bad.stdout and "1 do not" in bad.stdout, bad.stdout
    gone = run_cli("store", "stats", f"git+file://{tmp_path}/nothing.git")
    assert gone.returncode == 2 and len(gone.stderr.strip().splitlines()) == 1, gone.stderr


def test_reuse_into_stages_a_runs_results_for_a_trusted_push(
    origin, fake_matrix, tmp_path, run_cli
):
    stage = tmp_path / "stage"
    run = ("run", "--matrix", fake_matrix, "--reuse", origin, "--out", tmp_path / "o")
    got = run_cli(*run, "--reuse-into", stage, cache=tmp_path / "cache")
    assert got.returncode == 1 and len(list(stage.glob("results/*/*.json"))) == 6, got.stderr
    assert not git("ls-remote", origin.removeprefix("git+"))  # the remote untouched
    assert "published 6 entries" in run_cli("store", "push", stage, origin).stdout
    both = run_cli(*run, "--reuse-read-only", "--reuse-into", stage)
    assert both.returncode == 2 and "--reuse-into: goes with" in both.stderr
