"""Where a module's source lies in a tree: one rule (mlagate.modulefiles), not one per reader."""

from pathlib import Path

from mlagate.modulefiles import module_file, source_file

SRC = Path(__file__).parents[1] / "src" / "mlagate"


def test_a_module_is_its_file_else_its_package_init(tmp_path):
    (tmp_path / "rt" / "models" / "pkg").mkdir(parents=True)
    (tmp_path / "rt" / "models" / "a.py").write_text("")
    (tmp_path / "rt" / "models" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "rt" / "models" / "both").mkdir()
    (tmp_path / "rt" / "models" / "both" / "__init__.py").write_text("")
    (tmp_path / "rt" / "models" / "both.py").write_text("")
    models = tmp_path / "rt" / "models"
    assert module_file(tmp_path, "rt.models.a") == models / "a.py"
    assert module_file(tmp_path, "rt.models.pkg") == models / "pkg" / "__init__.py"
    assert module_file(tmp_path, "rt.models.both") == models / "both.py"  # the file first
    assert module_file(tmp_path, "rt.models.none") is None
    assert source_file(models / "a") == models / "a.py"
    (models / "folder").mkdir()  # a folder that is no package
    assert source_file(models / "folder") is None


OTHER_RULES = {
    "scan/helpers.py": "another rule: a relative import's target is a module or any folder (a "
    "namespace package)"
}


def _writes_the_rule(text: str) -> bool:
    return 'with_suffix(".py")' in text and '"__init__.py"' in text


def test_no_other_module_writes_the_rule_again():
    """The worker keeps its own (it may import only mlagate.worker and the guard model)."""
    found = [
        p.relative_to(SRC).as_posix()
        for p in sorted(SRC.rglob("*.py"))
        if _writes_the_rule(p.read_text())
    ]
    assert found == ["modulefiles.py", *OTHER_RULES]
    planted = 'for p in (base.with_suffix(".py"), base / "__init__.py"):\n    pass\n'
    assert _writes_the_rule(planted)
