"""One launcher of the pytest process: mlagate.gate.launch builds pytest's command line for
mlagate run (head runs and resumes too) and mlagate mutate, and nothing else in src/ does. A
module counts as a launcher when it names `-m pytest` in a list, calls pytest.main, or names
any --mlagate-* option outside the harness (the pytest side, which declares and reads them)."""

import ast
import shutil
from pathlib import Path

import mlagate

SRC = Path(mlagate.__file__).parent
SECOND = """
import sys

def start(plan):
    return [sys.executable, "-m", "pytest", "suites", "--mlagate-handoff", str(plan)]
"""
IN_PROCESS = """
import pytest

def run(plan):
    return pytest.main(["suites"])
"""
OPTIONS_ONLY = """
def extra(out):
    return ["--mlagate-out", str(out)]
"""


def _builds_argv(tree: ast.AST, harness: bool) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if any(a == "-m" and b == "pytest" for a, b in zip(words, words[1:], strict=False)):
                return True
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "main"
            and isinstance(node.value, ast.Name)
            and node.value.id == "pytest"
        ):
            return True
        if (
            not harness
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("--mlagate-")
        ):
            return True
    return False


def launchers(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if _builds_argv(ast.parse(path.read_text(encoding="utf-8")), rel.startswith("harness/")):
            found.append(rel)
    return found


def test_exactly_one_module_builds_the_pytest_command_line():
    assert launchers(SRC) == ["gate/launch.py"]


def test_a_second_launcher_is_found(tmp_path):
    root = tmp_path / "src"
    shutil.copytree(SRC, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "mutate" / "second.py").write_text(SECOND)
    assert launchers(root) == ["gate/launch.py", "mutate/second.py"]
    for text in (IN_PROCESS, OPTIONS_ONLY):
        (root / "mutate" / "second.py").write_text(text)
        assert launchers(root) == ["gate/launch.py", "mutate/second.py"]


def test_run_and_mutate_start_pytest_through_the_launcher():
    for module in ("gate/run.py", "mutate/run.py"):
        tree = ast.parse((SRC / module).read_text(encoding="utf-8"))
        made = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "Launch"
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "launch"
        ]
        assert made, f"{module} builds no launch.Launch"


def test_the_command_line_names_the_plan_and_no_selection(tmp_path):
    from mlagate.gate import launch

    job = launch.Launch(
        tmp_path / "plan.json", (tmp_path / "test_x.py",), tmp_path, "run-1", "none", None, 2
    )
    argv = job.argv()
    assert argv[argv.index("--mlagate-handoff") + 1] == str(tmp_path / "plan.json")
    assert argv[argv.index("-n") + 1] == "2" and "no:xdist" not in argv
    named = {a for a in argv if a.startswith("--mlagate-")}
    assert named == {"--mlagate-handoff", "--mlagate-out", "--mlagate-cpu"}
    serial = launch.Launch(tmp_path / "p.json", (), tmp_path, "r", serial=True, workers=4).argv()
    assert "-n" not in serial and serial[serial.index("no:xdist") - 1] == "-p"
    assert job.env()["MLAGATE_RUN_ID"] == "run-1"
