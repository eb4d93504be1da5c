import json
import multiprocessing
from pathlib import Path

import pytest

from mlagate import matrix
from mlagate.arm import arms

from .conftest import ROOT


def _arm(fake_matrix: Path, name: str = "fake-stock"):
    m = matrix.load(fake_matrix)
    return m.arms[name], m.runtimes["fakemla"]


def test_path_arm_is_copied_into_a_content_addressed_directory(fake_matrix, fake_cache):
    arm, rt = _arm(fake_matrix)
    first = arms.materialise(arm, rt, fake_cache)
    assert (first.site / "fakemla" / "models" / "good.py").is_file()
    assert json.loads((first.dir / "arm.json").read_text())["key"] == first.key
    again = arms.materialise(arm, rt, fake_cache)
    assert again.dir == first.dir
    (fake_matrix.parent / "fakemla-tree" / "fakemla" / "models" / "good.py").write_text(
        "# changed\n"
    )
    changed = arms.materialise(arm, rt, fake_cache)
    assert changed.key != first.key


def _materialise_in_child(args):
    fake_matrix, cache = args
    arm, rt = _arm(Path(fake_matrix))
    return str(arms.materialise(arm, rt, Path(cache)).dir)


def test_two_runs_materialising_at_once_share_one_install(fake_matrix, fake_cache):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        dirs = pool.map(_materialise_in_child, [(str(fake_matrix), str(fake_cache))] * 8)
    assert len(set(dirs)) == 1
    assert [p.name for p in (fake_cache / "arms").iterdir() if p.is_dir()] == [Path(dirs[0]).name]


def test_a_patch_that_does_not_apply_is_one_line(fake_matrix, fake_cache):
    text = fake_matrix.read_text().replace(
        "    role: stock  # role", "    patches: [mlx.patch]  # patch\n    role: stock  # role", 1
    )
    patch = ROOT / "patches" / "mlx-lm-0.32.2-mla-threshold.patch"
    (fake_matrix.parent / "mlx.patch").write_bytes(patch.read_bytes())
    fake_matrix.write_text(text)
    arm, rt = _arm(fake_matrix)
    with pytest.raises(arms.ArmError) as err:
        arms.materialise(arm, rt, fake_cache)
    assert str(err.value).startswith("arm fake-stock: patch mlx.patch does not apply: error:")
    assert "\n" not in str(err.value)
    assert not [p for p in (fake_cache / "arms").iterdir() if p.is_dir()], (
        "a failed install leaves nothing behind"
    )


def test_export_and_import_carry_the_cache(fake_matrix, fake_cache, tmp_path):
    arm, rt = _arm(fake_matrix)
    inst = arms.materialise(arm, rt, fake_cache)
    archive = arms.export({arm.id: inst}, tmp_path / "arms.tar.gz")
    other = tmp_path / "other-cache"
    assert arms.import_cache(archive, other) == [inst.key]
    assert arms.materialise(arm, rt, other).dir == other / "arms" / inst.key


@pytest.mark.arms
def test_an_arm_that_fails_to_install_names_the_arm_and_pip(tmp_path):
    arm = matrix.Arm("ghost", "mlx-lm", matrix.ArmSource("pypi", "mlx-lm==0.0.999"), "stock")
    rt = matrix.Runtime("mlx-lm", "mlx_lm", "mlx-lm")
    with pytest.raises(
        arms.ArmError,
        match=r"^arm ghost: installing mlx-lm==0.0.999 failed: ERROR: .*mlx-lm==0.0.999",
    ):
        arms.materialise(arm, rt, tmp_path)


# arm.json: an mlagate.arm/1 document read through mlagate.documents. The manifests below are
# verbatim shapes of ones already in arm caches, written before arm.json had a schema field.
UNVERSIONED = {
    "first writer": ["arm", "runtime", "source", "patches", "needs", "version", "key", "created"],
    "with notes": [
        "arm", "runtime", "source", "patches", "needs", "activate_install", "version", "key",
        "notes", "created",
    ],
}  # fmt: skip


@pytest.mark.parametrize("shape", sorted(UNVERSIONED))
def test_a_manifest_without_a_schema_is_upgraded_not_reinstalled(shape, fake_matrix, fake_cache):
    arm, rt = _arm(fake_matrix)
    first = arms.materialise(arm, rt, fake_cache)
    written = json.loads((first.dir / "arm.json").read_text())
    assert written["schema"] == "mlagate.arm/1"
    old = {k: written[k] for k in UNVERSIONED[shape]}
    (first.dir / "arm.json").write_text(json.dumps(old, indent=1))
    arms.packs.write_content(first.dir)  # as the cache held it: content manifest and all
    before = (first.dir / "arm.json").stat().st_mtime_ns
    again = arms.materialise(arm, rt, fake_cache)
    assert (again.dir, again.version, again.notes) == (first.dir, first.version, ())
    assert (first.dir / "arm.json").stat().st_mtime_ns == before, "read, not rewritten"
    manifest = arms.read_manifest(first.dir)
    assert manifest["schema"] == "mlagate.arm/1" and manifest["notes"] == []
    arms.packs.verify(first.dir)  # still the files its content manifest names


@pytest.mark.parametrize(
    "text",
    ["{}", "not json", '{"schema": "mlagate.arm/9"}', '{"arm": "x", "version": "tree"}'],
)
def test_a_manifest_that_cannot_be_read_is_installed_again(text, fake_matrix, fake_cache):
    arm, rt = _arm(fake_matrix)
    first = arms.materialise(arm, rt, fake_cache)
    (first.dir / "arm.json").write_text(text)
    again = arms.materialise(arm, rt, fake_cache)
    assert again.dir == first.dir and again.version == first.version
    assert arms.read_manifest(again.dir)["key"] == again.key
    arms.packs.verify(again.dir)


def test_a_bad_manifest_names_its_file_and_key(fake_matrix, fake_cache):
    arm, rt = _arm(fake_matrix)
    inst = arms.materialise(arm, rt, fake_cache)
    manifest = json.loads((inst.dir / "arm.json").read_text())
    (inst.dir / "arm.json").write_text(json.dumps({**manifest, "key": "../../etc"}))
    with pytest.raises(arms.documents.DocumentError) as err:
        arms.read_manifest(inst.dir)
    assert str(err.value).startswith(f"{inst.dir / 'arm.json'}: key: ")


def test_plan_trusts_only_an_arm_whose_files_did_not_change(fake_matrix, fake_cache):
    """verify_all(trust_unchanged=True), as mlagate plan calls it, skips hashing an arm whose
    files stand as at its last full check; a write is seen even with the size and mtime put
    back (ctime), and the arm is then hashed and refused."""
    import os

    arm, rt = _arm(fake_matrix)
    inst = arms.materialise(arm, rt, fake_cache)
    assert not arms._unchanged(inst.dir), "never checked: hashed"
    arms.verify_all({arm.id: inst}, trust_unchanged=True)
    assert arms._unchanged(inst.dir)
    target = inst.site / "fakemla" / "models" / "good.py"
    st = target.stat()
    data = target.read_bytes()
    target.write_bytes(bytes([data[0] ^ 1]) + data[1:])  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime
    assert not arms._unchanged(inst.dir)
    with pytest.raises(arms.ArmError, match="good.py changed since install"):
        arms.verify_all({arm.id: inst}, trust_unchanged=True)
