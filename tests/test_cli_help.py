"""Help, --version and the plan's footer: what a new user sees first."""

import re

from mlagate import __version__


def test_version_and_subcommand_descriptions(run_cli):
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"mlagate {__version__}"
    for cmd, words in (
        ("merge", "merge shard result directories"),
        ("scan", "find single-query guards"),
        ("health", "is this machine fit"),
    ):
        out = run_cli(cmd, "--help").stdout
        usage, description = out.split("\n\n")[:2]
        assert description.startswith(words), out


def test_run_help_lists_the_matrix_suites_and_profiles(fake_matrix, run_cli):
    out = run_cli("run", "--matrix", fake_matrix, "--help").stdout
    assert (
        f"in {fake_matrix}:" in out
        and "correctness suites: probes" in out
        and "profiles: quick" in out
    )
    assert "--resume OUT" in out and "--strict" in out
    bad = fake_matrix.parent / "bad.yaml"
    bad.write_text("version: 1\n")
    out = run_cli("plan", "--matrix", bad, "--help")
    assert out.returncode == 0 and "(the matrix could not be read for this list:" in out.stdout


def test_plan_footer_counts_the_selection_and_estimates_time(fake_matrix, fake_cache, run_cli):
    proc = run_cli("plan", "--matrix", fake_matrix, "--module", "fake/good", cache=fake_cache)
    assert proc.returncode == 0, proc.stderr
    footer = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"2 cases selected \(1 argued-not-measured\), 1 modules, 1 arms; estimated \d+:\d\d on "
        r"one worker, from the cost table",
        footer,
    ), footer


def test_abbreviated_options_are_refused(fake_matrix, run_cli):
    for argv in (
        ("plan", "--matrix", fake_matrix, "--suit", "probes"),
        ("report", "x", "--ou", "y"),
        ("run", "--matrix", fake_matrix, "--resum", "x"),
    ):
        proc = run_cli(*argv)
        assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr, argv
