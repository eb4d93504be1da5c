"""mlagate report: the commit page, plots, JUnit XML, summary, merged JSON and history, rendered
from result JSON on disk (the committed CPU and H200 reference runs, a live run of the fake
runtime, and a live run of a real arm)."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mlagate import results
from mlagate.report import build as report_build
from mlagate.report import history, junit
from mlagate.report import merged as merged_doc
from mlagate.report import page as report
from mlagate.report.catalogue import Catalogue

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = [
    *sorted((ROOT / "docs/reference/cpu").glob("*.tgz")),
    *sorted((ROOT / "docs/reference/h200").glob("*.tgz")),
]
MARKUP = "<script>alert(1)</script>"


def result(
    suite="probes",
    module="mlx-lm/deepseek_v3",
    arm="mlx-lm-0.32.2",
    verdict="pass",
    metrics=None,
    started=0.0,
    geometry="deepseek-v3",
    reason="",
    backend="cpu",
):
    r = results.Result(
        case={
            "id": f"{suite}::{module}::{arm}::{geometry}::float32::{backend}",
            "suite": suite,
            "module": module,
            "arm": arm,
            "geometry": geometry,
            "dtype": "float32",
            "backend": backend,
            "profile": "quick",
            "runner": "linux-cpu",
        },
        verdict=verdict,
        reason=reason or verdict,
        metrics=metrics or {},
        replay=f"mlagate run --suite {suite} --module {module} --arm {arm}",
        evidence="argued" if verdict == "argued" else "synthetic",
        started=started,
    )
    return r.to_json()


def write_results(folder: Path, rows: list[dict]) -> Path:
    (folder / "results").mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(rows):
        (folder / "results" / f"r{i}.json").write_text(json.dumps(r))
    return folder


def raw_markup(html: str) -> list[str]:
    """Markup that came from a result and was not escaped: an executable tag or a bold tag from the
    planted arm name."""
    return re.findall(r"<script[\s>]|<b>x</b>", html.replace(report.COPY_SCRIPT, ""))


def markup_rows() -> list[dict]:
    return [
        result(
            module=MARKUP,
            arm="arm<b>x</b>",
            verdict="fail",
            reason=f'reason with {MARKUP} & "quotes"',
        ),
        result(
            suite="marginal_cost",
            module=MARKUP,
            arm="arm<b>x</b>",
            verdict="pass",
            metrics={
                "marginal": {
                    "L=2": {
                        "per_T": {
                            "64": {"marginal_s": 0.001, "ci_s": [0.0009, 0.0011]},
                            "256": {"marginal_s": 0.0012, "ci_s": [0.001, 0.0013]},
                        }
                    }
                }
            },
        ),
    ]


# --- escaping --------------------------------------------------------------------------------


def test_a_module_name_holding_markup_renders_as_text(tmp_path):
    src = write_results(tmp_path / "run", markup_rows())
    outcome = report_build.build([src], tmp_path / "html", commit="abc123")
    html = (tmp_path / "html/index.html").read_text()
    assert raw_markup(html) == []
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "arm&lt;b&gt;x&lt;/b&gt;" in html
    assert (
        html.lower().count("<script") == 1 and report.COPY_SCRIPT in html
    )  # the page's one script: the copy buttons
    for svg in (tmp_path / "html/plots").glob("*.svg"):
        assert raw_markup(svg.read_text()) == []
        ET.fromstring(svg.read_text())  # each plot is well-formed XML
    summary = (tmp_path / "html/summary.md").read_text()
    assert raw_markup(summary) == [] and "&lt;script&gt;" in summary
    tree = ET.parse(tmp_path / "html/junit.xml")
    assert {tc.get("classname") for tc in tree.iter("testcase")} == {
        f"probes.{MARKUP}",
        f"marginal_cost.{MARKUP}",
    }
    assert outcome.merged["results"][0]["module"] == MARKUP


def test_the_markup_check_catches_an_unescaped_page(monkeypatch):
    """The escaping test can fail: with the templates' escaping switched off, the planted markup
    is found."""
    monkeypatch.setattr(report, "ENV", report.ENV.overlay(autoescape=False))
    merged = merged_doc.merge([("planted", markup_rows())], "abc")
    assert raw_markup(report.page(merged))


# --- the reference runs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "html"
    return report_build.build(REFERENCE, out, commit="reference")


def test_the_reference_report_holds_every_case_and_every_output(reference_report):
    out, merged = reference_report.out, reference_report.merged
    loaded = [r for p in REFERENCE for r in merged_doc.load_source(p)]
    assert (
        len(merged["results"])
        == len({r["case_id"] for r in loaded})
        == len(loaded) - len(merged["superseded"])
    )
    assert (
        merged["schema"] == "mlagate.merged/1"
        and json.loads((out / "merged.json").read_text()) == merged
    )
    counts = merged["counts"]
    assert counts["pass"] and counts["fail"] and counts["invalid"] and counts["argued"]
    root = ET.parse(out / "junit.xml").getroot()
    assert (
        int(root.get("tests")),
        int(root.get("failures")),
        int(root.get("errors")),
        int(root.get("skipped")),
    ) == (len(merged["results"]), counts["fail"], counts["invalid"], counts["argued"])
    assert all(s.get("message").startswith("argued-not-measured") for s in root.iter("skipped"))
    html = (out / "index.html").read_text()
    for r in merged["results"]:
        if r["verdict"] in ("fail", "invalid"):
            assert report.esc(r["replay"]) in html and report.esc(r["reason"]) in html
    kinds = {p.kind for p in reference_report.plots}
    assert kinds == {"marginal", "crossover", "equivalence", "throughput"}
    assert (
        len(list((out / "plots").glob("*.svg")))
        == len(reference_report.plots)
        == html.count('<figure class="plot"')
    )
    assert "no data" not in html, (
        "the reference set holds rows for every plot, speculative throughput included"
    )
    summary = (out / "summary.md").read_text()
    assert f"{counts['fail']} failed" in summary and "| crossover |" in summary


def test_the_same_case_from_two_runs_keeps_the_later_one():
    early = result(verdict="fail", started=1000.0)
    late = result(verdict="pass", started=2000.0)
    merged = merged_doc.merge([("a", [late]), ("b", [early])], "c")
    assert [r["verdict"] for r in merged["results"]] == ["pass"]
    assert merged["superseded"] == [
        {"case_id": early["case_id"], "source": "b", "started": early["started"]}
    ]


def test_an_aa_run_never_stands_in_for_the_arms_verdict():
    from mlagate.plan import Case

    def row(aa: bool, verdict: str, started: float) -> dict:
        case = Case(
            "l1_parity",
            "mlx-lm/deepseek_v3",
            "mlx-lm-0.32.2-patched",
            "deepseek-v3",
            "float32",
            "cpu",
            "quick",
            "linux-cpu",
            "synthetic",
            aa=aa,
        )
        return results.Result(
            case=case.to_json(),
            verdict=verdict,
            reason=verdict,
            replay=case.replay(),
            started=started,
        ).to_json()

    gate, aa = row(False, "pass", 1000.0), row(True, "invalid", 2000.0)
    merged = merged_doc.merge([("run", [gate]), ("aa-run", [aa])], "c")
    assert (
        sorted(r["verdict"] for r in merged["results"]) == ["invalid", "pass"]
        and not merged["superseded"]
    )
    html = report.page(merged)
    assert (
        "<td>mlx-lm-0.32.2-patched (A/A)</td>" in html and "<td>mlx-lm-0.32.2-patched</td>" in html
    )
    assert aa["replay"].endswith(" --aa")


def _section(suite: str):
    """The charts the report draws for a shipped suite's results (its contract's plots)."""
    return lambda rows: [p for p in Catalogue.shipped().plots(rows) if p.kind != "figures"]


def test_throughput_rows_plot_and_nothing_without_them():
    throughput_plots = _section("speculative")
    rows = [
        result(
            suite="speculative",
            verdict="pass",
            metrics={
                "throughput": [
                    {"context": 1024, "plain_tok_s": 30.0, "spec_tok_s": 55.0},
                    {"context": 4096, "plain_tok_s": 28.0, "spec_tok_s": 40.0},
                ]
            },
        )
    ]
    (p,) = throughput_plots(rows)
    assert p.slug.startswith("throughput-") and p.svg.count('<polyline class="series"') == 2
    assert throughput_plots([result(suite="speculative")]) == []
    assert history.key_figures(rows)[
        "mlx-lm/deepseek_v3|spec_speedup|mlx-lm-0.32.2|deepseek-v3|cpu"
    ] == pytest.approx(40 / 28)
    # the speculative suite's shape: metrics.rows, one row per context and draft
    suite_rows = [
        {"context": P, "draft": d, "plain_tok_s": 30.0, "spec_tok_s": s, "ratio": s / 30}
        for P in (256, 1024)
        for d, s in (("self", 50.0), ("perturbed", 35.0))
    ]
    spec = [result(suite="speculative", verdict="pass", metrics={"rows": suite_rows})]
    (p,) = throughput_plots(spec)
    assert (
        p.svg.count('<polyline class="series"') == 3
        and "speculative (self)" in p.svg
        and "speculative (perturbed)" in p.svg
    )
    assert history.key_figures(spec)[
        "mlx-lm/deepseek_v3|spec_speedup|mlx-lm-0.32.2|deepseek-v3|cpu"
    ] == pytest.approx(50 / 30)


def test_equivalence_plots_elementwise_histograms_when_rows_carry_them():
    hist = {"edges": [0.5, 1.0, 2.0], "counts": [5, 3, 2, 0]}
    stats = {"max": 3.0, "p99": 2.5, "mean": 1.0}
    with_hist = result(
        suite="equivalence",
        metrics={
            "errors_ulps": {
                "float32/none/L=2": {
                    "absorbed": {**stats, "hist": hist},
                    "materialised": {**stats, "hist": hist},
                }
            }
        },
    )
    without = result(
        suite="equivalence",
        arm="old",
        metrics={"errors_ulps": {"float32/none/L=2": {"absorbed": stats, "materialised": stats}}},
    )
    plots_ = _section("equivalence")([with_hist, without])
    assert [p.slug for p in plots_] == [
        "equivalence-elements-cpu-float32",
        "equivalence-cpu-float32",
    ]
    assert plots_[0].svg.count('class="bar"') == 6  # 3 non-empty bins x 2 paths, as % of elements
    assert "50 in bin" in plots_[0].svg  # 5 of 10 elements below 0.5 ULP


def test_junit_maps_every_verdict():
    rows = [result(verdict=v, arm=f"a-{v}") for v in ("pass", "fail", "invalid", "argued")]
    root = ET.fromstring(junit.render(rows))
    kids = {tc.get("name").split("/")[0]: [c.tag for c in tc] for tc in root.iter("testcase")}
    assert kids == {
        "a-pass": [],
        "a-fail": ["failure"],
        "a-invalid": ["error"],
        "a-argued": ["skipped"],
    }


# --- bad input -------------------------------------------------------------------------------


def test_bad_input_is_a_one_line_error_with_exit_2(tmp_path, run_cli):
    proc = run_cli("report", tmp_path / "nowhere", "--out", tmp_path / "o")
    assert (
        proc.returncode == 2
        and proc.stderr.strip()
        == f"mlagate: error: {tmp_path / 'nowhere'}: no such file or directory"
    )
    bad = tmp_path / "bad"
    (bad / "results").mkdir(parents=True)
    (bad / "results" / "x.json").write_text(json.dumps({"schema": "other/9"}))
    proc = run_cli("report", bad, "--out", tmp_path / "o")
    assert (
        proc.returncode == 2
        and len(proc.stderr.strip().splitlines()) == 1
        and "x.json: schema is 'other/9'" in proc.stderr
    )
    proc = run_cli("report", REFERENCE[0], "--out", tmp_path / "o", "--commit", "../evil")
    assert proc.returncode == 2 and "--commit" in proc.stderr


# --- history ---------------------------------------------------------------------------------


def _commit_rows(marginal_ms: float) -> list[dict]:
    per_t = {
        "256": {"marginal_s": marginal_ms / 4e3, "ci_s": [0, 1]},
        "4096": {"marginal_s": marginal_ms / 1e3, "ci_s": [0, 1]},
    }
    return [
        result(
            suite="marginal_cost",
            arm="mlx-lm-0.32.2-patched",
            metrics={"marginal": {"L=2": {"per_T": per_t}}},
        ),
        result(suite="probes", verdict="fail"),
    ]


@pytest.mark.parametrize("step", [True, False])
def test_history_flags_a_planted_step_and_only_then(tmp_path, step):
    hist = tmp_path / "hist"
    values = [2.0, 2.1, 1.9, 2.05, 2.0, 1.95, 2.1, 2.0] + (
        [6.0, 6.2, 5.9, 6.1] if step else [2.0, 2.1, 1.9, 2.0]
    )
    for i, v in enumerate(values):
        merged = merged_doc.merge(
            [("run", _commit_rows(v))], f"c{i:02d}", f"2026-01-01T00:{i:02d}:00Z"
        )
        history.add(hist, merged)
    html = (hist / "index.html").read_text()
    assert html.count('<a href="c') >= len(values)  # every commit page is linked
    assert all((hist / f"c{i:02d}" / "index.html").exists() for i in range(len(values)))
    flagged = re.findall(r'<td class="step"><a href="(c\d\d)/index.html">', html)
    assert flagged == (["c08"] if step else [])
    commits = sorted(
        (history._figures(p) for p in hist.iterdir() if p.is_dir()), key=lambda c: c["commit_time"]
    )
    (series,) = [s for s in history.trends(commits) if s["figure"] == "marginal_ms"]
    assert series["values"] == pytest.approx(values)


def test_rerendering_a_merged_json_keeps_its_commit(tmp_path, run_cli):
    report_build.build(
        [write_results(tmp_path / "run", [result()])], tmp_path / "a", commit="c0ffee"
    )
    proc = run_cli("report", tmp_path / "a" / "merged.json", "--out", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    again = json.loads((tmp_path / "b" / "merged.json").read_text())
    assert (
        again["commit"] == "c0ffee"
        and again["results"] == json.loads((tmp_path / "a" / "merged.json").read_text())["results"]
    )


def test_a_history_commit_folder_is_a_source(tmp_path):
    hist = tmp_path / "hist"
    history.add(hist, merged_doc.merge([("run", _commit_rows(2.0))], "c00", "2026-01-01T00:00:00Z"))
    assert (hist / "c00" / "figures.json").exists()
    assert (
        merged_doc.load_source(hist / "c00")
        == json.loads((hist / "c00" / "merged.json").read_text())["results"]
    )


def test_history_rerender_rebuilds_old_pages_from_their_json(tmp_path):
    hist = tmp_path / "hist"
    history.add(hist, merged_doc.merge([("run", _commit_rows(2.0))], "c00", "2026-01-01T00:00:00Z"))
    (hist / "c00" / "index.html").unlink()
    history.add(
        hist,
        merged_doc.merge([("run", _commit_rows(2.0))], "c01", "2026-01-01T00:01:00Z"),
        rerender=True,
    )
    assert "c00" in (hist / "c00" / "index.html").read_text()


# --- live runs through the CLI ---------------------------------------------------------------


def test_live_fake_run_renders(fake_matrix, fake_cache, tmp_path, run_cli):
    out = tmp_path / "out"
    proc = run_cli("run", "--matrix", fake_matrix, "--out", out, cache=fake_cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    proc = run_cli(
        "report",
        out,
        "--out",
        tmp_path / "html",
        "--history",
        tmp_path / "hist",
        "--commit",
        "f00d",
    )
    assert proc.returncode == 0, proc.stderr
    merged = json.loads((tmp_path / "html/merged.json").read_text())
    assert merged["counts"] == {"pass": 4, "fail": 2, "invalid": 1, "argued": 1}
    root = ET.parse(tmp_path / "html/junit.xml").getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == (
        "8",
        "2",
        "1",
        "1",
    )
    assert (tmp_path / "hist/f00d/index.html").exists() and "f00d" in (
        tmp_path / "hist/index.html"
    ).read_text()


@pytest.mark.arms
def test_live_probes_run_of_a_real_arm_renders(real_cache, tmp_path, run_cli):
    out = tmp_path / "out"
    proc = run_cli(
        "run", "--suite", "probes", "--module", "mlx-lm/deepseek_v3", "--out", out, cache=real_cache
    )
    assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr
    proc = run_cli("report", out, "--out", tmp_path / "html")
    assert proc.returncode == 0, proc.stderr
    merged = json.loads((tmp_path / "html/merged.json").read_text())
    assert merged["results"] and {r["module"] for r in merged["results"]} == {"mlx-lm/deepseek_v3"}
    assert merged["counts"]["pass"] >= 1
    html = (tmp_path / "html/index.html").read_text()
    assert 'id="verdict-matrix"' in html and "mlx-lm-0.32.2-patched" in html


def test_one_case_id_on_two_runners_keeps_both():
    metal = result(verdict="fail", backend="gpu")
    cuda = dict(result(verdict="pass", backend="gpu", started=1.0), runner="linux-cuda-h200")
    metal["runner"] = "macos-metal"
    assert metal["case_id"] == cuda["case_id"]
    merged = merged_doc.merge([("a", [metal]), ("b", [cuda])], "c0")
    assert (
        merged["counts"]["fail"] == 1 and merged["counts"]["pass"] == 1 and not merged["superseded"]
    )


def test_cases_merge_found_missing_are_shown_everywhere(tmp_path):
    folder = write_results(tmp_path / "merged", [result(verdict="pass")])
    (folder / "merge.json").write_text(
        json.dumps(
            {
                "schema": "mlagate.merge/1",
                "missing": ["linux-cpu::probes::x::y::g::float32::cpu"],
                "missing_shards": ["2/2 of runner linux-cpu"],
                "unplanned": [],
            }
        )
    )
    outcome = report_build.build([folder], tmp_path / "out", commit="c1")
    html = (tmp_path / "out" / "index.html").read_text()
    assert (
        'id="gaps"' in html
        and "missing linux-cpu::probes::x::y::g::float32::cpu" in html
        and "missing shard 2/2 of runner linux-cpu" in html
    )
    assert (
        "Not a complete run: 1 planned cases without a result, 1 missing shards"
        in (tmp_path / "out" / "summary.md").read_text()
    )
    root = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    assert root.get("errors") == "1" and root.get("tests") == "2"
    assert outcome.merged["gaps"]["missing_shards"] == ["2/2 of runner linux-cpu"]
    clean = report_build.build(
        [write_results(tmp_path / "clean", [result(verdict="pass")])],
        tmp_path / "out2",
        commit="c2",
    )
    assert (
        "gaps" not in clean.merged
        and 'id="gaps"' not in (tmp_path / "out2" / "index.html").read_text()
    )
