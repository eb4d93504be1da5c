"""Hand-offs for tests that start pytest on a suite themselves, as no mlagate verb does (a
pytester suite, a performance suite under xdist, a matrix whose arm holds modules it does not
register): the plan mlagate run would write for the selection, gaps allowed."""

from pathlib import Path

from mlagate import matrix, runplan
from mlagate.gate import planning
from mlagate.machine import runners
from mlagate.plan import Selection


def write(matrix_path, out: Path, cache: Path, suites=(), modules=(), arms=()) -> Path:
    m = matrix.load(Path(matrix_path))
    runner, backend = runners.resolve(m, None, None)
    selection = Selection(tuple(suites), tuple(modules), tuple(arms))
    outcome = planning.plan(m, selection, "quick", backend, runner, cache)
    cases = tuple(outcome.cases)
    return runplan.write(
        Path(out), runplan.HandOff(m, "quick", backend, runner, False, cases, outcome.installs)
    )


def options(plan: Path, out: Path, cache: Path) -> list[str]:
    """pytest's mlagate options for a hand-off."""
    return [
        *("--mlagate-handoff", str(plan)),
        *("--mlagate-out", str(out), "--mlagate-cache", str(cache)),
    ]
