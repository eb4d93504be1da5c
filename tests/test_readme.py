"""The README is a front door: short, its commands the ones CI runs, its links alive."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _links():
    spec = importlib.util.spec_from_file_location("links", ROOT / "tools" / "links.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_short_and_holds_the_commands_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    commands = re.findall(r"^    (\S.*)$", readme[: readme.index("## What it checks")], re.M)
    assert commands == [
        "python3 -m venv .venv",
        '.venv/bin/pip install -e ".[cpu,test]"',
        ".venv/bin/mlagate run -n 2",
        ".venv/bin/tox -e tests",
    ]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python3 -m venv .venv" in ci and ".venv/bin/tox -e tests" in ci
    pip = [line for line in ci if line.startswith(".venv/bin/pip install")]
    assert pip and all('-e ".[cpu,test]"' in line for line in pip)


def test_every_shipped_suite_has_its_line_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for contract in ROOT.glob("suites/*/*.suite.yaml"):
        name = contract.name.removesuffix(".suite.yaml")
        assert f"| `{name}` |" in readme, f"README.md: no line for the suite {name}"


def test_every_relative_link_of_the_readme_and_docs_resolves():
    links = _links()
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert [line for page in pages for line in links.broken(page)] == []


def test_a_broken_link_or_anchor_is_found(tmp_path, monkeypatch):
    links = _links()
    monkeypatch.setattr(links, "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Exit codes\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md#exit-codes) [gone](docs/b.md) [bad](docs/a.md#exit) [web](https://x.org)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert links.broken(page) == [
        "README.md: docs/b.md: no such file",
        "README.md: docs/a.md#exit: no such heading",
    ]


WORDS = (
    "runtime arm module geometry case suite contract worker probe sample run verdict outcome "
    "evidence gate plan result expectation control"
).split()


def missing_words(glossary: str) -> list[str]:
    """The words of the vocabulary the glossary defines neither as an entry nor in its table."""
    return [w for w in WORDS if f"- **{w}**" not in glossary and f"\n| {w} |" not in glossary]


def test_the_glossary_defines_every_word_of_the_vocabulary():
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    assert missing_words(glossary) == []
    assert missing_words(glossary.replace("- **probe**", "- probe")) == ["probe"]
    for word in ("plan", "gate", "run", "contract"):  # overloaded today: one meaning kept
        assert f"\n| {word} |" in glossary, f"docs/glossary.md: no row for {word!r}"
