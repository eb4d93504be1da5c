"""The inputs past the matrix file (command lines, documents, history folders, arm packs): every
example of issue 27 by name, then a seeded sample of each corpus; each case a `python -m mlagate`
in a process group of its own with a 20 s limit (tests/input_fuzz.py judges it)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from . import input_corpora, input_fuzz

# (kind, case name) of each example the issue reproduced on main at 8dd4a35
EXAMPLES = {
    "cli": [
        "run --suite nosuch",
        "run --module nosuch",
        "run --arm nosuch",
        "run --suite nosuch --shard 1/2 --backend cpu",
        "run --cache {d}/afile",
        "run --cache /dev/null",
        "run --cache {d}/fifo",
        "plan --cache /dev/null",
        "good: report from a folder whose name is not UTF-8",
        "run --shard ' 1/2'",
        "run --shard '1_0/20'",
        "run --shard '\u0661/\u0662'",
        "run --shard '+1/+2'",
        "health --min-free-gb '-1'",
        "health --min-free-gb 'nan'",
        "health --min-free-gb 'inf'",
        "run -n '99999999999999999999'",
    ],
    "documents": [
        "merge: two shards, the second's runner {d}/outside/evil",
        "merge: two shards, the second's runner ../../outside/evil",
        "report: a FIFO named *.tgz",
        "compare: a FIFO named *.tgz",
        "report: a FIFO result",
        "compare: a FIFO result",
        "merge: logs/ a link to /dev/zero",
        "merge: of nothing",
        "costs: duration NaN",
        "costs: duration Infinity",
        "merge: duration 1e308",
        "report: one case id in two files of one folder",
        "merge: runner missing",
        "merge: reason missing",
        "costs: runner missing",
        "report: geometry.id a list",
        "report: reason a lone surrogate",
    ],
    "history": [
        "--commit '..'",
        "GITHUB_SHA='..'",
        "a link at commit of the commit written",
        "a link at plots of the commit written",
        "a link at plot file of the commit written",
        "--history named javascript:",
        "a folder with figures.json 1.7e308 (a cache: recomputed)",
        "a folder with figures.json -1.7e308 (a cache: recomputed)",
        "a folder whose merged.json a 401-digit integer",
    ],
    "packs": ["code tampered, content.json consistent"],
}
SAMPLE = {"cli": 16, "documents": 20, "history": 8, "packs": 6}  # besides the examples


def _corpus(kind: str, tmp_path_factory) -> list[input_fuzz.Case]:
    if kind == "cli":
        return input_corpora.cli_cases(10_000)
    if kind == "documents":
        return input_fuzz.document_cases(10_000)
    if kind == "history":
        return input_corpora.history_cases(10_000)
    return input_corpora.pack_cases(10_000, _pack_folder(tmp_path_factory))


_PACKS = {}


def _pack_folder(tmp_path_factory):
    if "folder" not in _PACKS:
        _PACKS["folder"] = tmp_path_factory.mktemp("pack")
    return _PACKS["folder"]


def _judge_all(cases, root) -> list[input_fuzz.Verdict]:
    with ThreadPoolExecutor(2) as pool:
        return list(
            pool.map(lambda ic: input_fuzz.judge(ic[1], root / str(ic[0])), enumerate(cases))
        )


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_every_example_of_the_issue_is_handled(kind, tmp_path, tmp_path_factory):
    by_name = {c.name: c for c in _corpus(kind, tmp_path_factory)}
    missing = [n for n in EXAMPLES[kind] if n not in by_name]
    assert not missing, f"examples not in the {kind} corpus: {missing}"
    verdicts = _judge_all([by_name[n] for n in EXAMPLES[kind]], tmp_path)
    problems = [f"{v.case.name}: {v.problems[0]}" for v in verdicts if v.problems]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("kind", sorted(SAMPLE))
def test_a_seeded_sample_of_each_corpus_is_clean(kind, tmp_path, tmp_path_factory):
    """0 tracebacks, 0 hangs, 0 bad inputs accepted, 0 writes outside the verb's folders."""
    examples = set(EXAMPLES[kind])
    pool = [c for c in _corpus(kind, tmp_path_factory) if c.name not in examples]
    cases = input_fuzz._sample(__import__("random").Random(27), pool, SAMPLE[kind])
    t0 = time.monotonic()
    verdicts = _judge_all(cases, tmp_path)
    problems = [f"{v.case.name}: {v.problems[0]}" for v in verdicts if v.problems]
    assert not problems, "\n".join(problems)
    slowest = max(v.seconds for v in verdicts)
    assert slowest < input_fuzz.LIMIT_S
    print(f"{kind}: {len(cases)} cases in {time.monotonic() - t0:.1f} s, slowest {slowest:.1f} s")


def test_the_judge_can_fail(tmp_path):
    """Each kind of problem is caught: a traceback, a hang, a bad input accepted, a refusal of
    more than one line, a write outside the verb's folders."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "boom.py").write_text("raise RuntimeError('planted')\n")
    (tmp_path / "mods" / "talk.py").write_text(
        "import sys\nprint('mlagate: error: a\\nb', file=sys.stderr)\nsys.exit(2)\n"
    )
    env = {"PYTHONPATH": str(tmp_path / "mods")}
    good_plan = input_fuzz.Case("cli", "plan", ["plan", "--matrix", str(input_fuzz.FAKE)])
    cases = [
        (input_fuzz.Case("cli", "boom", [], env=env), "boom", "traceback"),
        (input_fuzz.Case("cli", "talk", [], env=env), "talk", "refusal not one line"),
        (good_plan, "mlagate", "bad input accepted"),
        (
            input_fuzz.Case(
                "cli",
                "merge outside",
                ["merge", "{d}/run", "--out", "{d}/outside"],
                lambda d: input_fuzz.run_folder(d),
                bad=False,
                codes=(0,),
                owned=("out",),
            ),
            "mlagate",
            "wrote outside",
        ),
    ]
    for i, (case, module, want) in enumerate(cases):
        verdict = input_fuzz.judge(case, tmp_path / str(i), module=module)
        assert verdict.problems and verdict.problems[0].startswith(want), verdict.problems
    hang = input_fuzz.judge(good_plan, tmp_path / "hang", limit_s=0.05)
    assert hang.problems == ["hang"]
