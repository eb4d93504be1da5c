"""History pages from untrusted folders: every value escaped, links only from commit ids,
a malformed folder skipped with a warning."""

import json
import os
import time

from mlagate.report import history
from mlagate.report import merged as merged_doc
from mlagate.report.catalogue import Catalogue

from .test_report import _commit_rows, result

PAYLOADS = ("<img src=x onerror=alert(1)>", '"><script>alert(1)</script>', "javascript:alert(1)")


def _add(hist, commit, rows=None, when="2026-01-01T00:00:00Z"):
    history.add(hist, merged_doc.merge([("run", rows or _commit_rows(2.0))], commit, when))


def _assert_inert(html: str) -> None:
    for needle in ("<img", "<script", 'href="javascript:'):
        assert needle not in html, needle


def test_a_crafted_history_folder_renders_inert(tmp_path, capsys):
    hist = tmp_path / "hist"
    _add(hist, "c00")
    evil_rows = [
        result(module=PAYLOADS[0], arm=PAYLOADS[1]),
        result(module=PAYLOADS[1], verdict="fail"),
    ]
    _add(hist, "c01", evil_rows, "2026-01-01T00:01:00Z")
    # a commit id that is a script link, in a folder of the same name and in another folder
    for folder in ("javascript:alert(1)", "plain"):
        merged = merged_doc.merge([("run", _commit_rows(2.0))], "c02", "2026-01-01T00:02:00Z")
        merged["commit"] = "javascript:alert(1)"
        (hist / folder).mkdir()
        (hist / folder / "merged.json").write_text(json.dumps(merged))
    # counts that carry markup, through a current figures.json cache
    (hist / "c03").mkdir()
    (hist / "c03" / "merged.json").write_text(
        json.dumps(merged_doc.merge([("run", _commit_rows(2.0))], "c03"))
    )
    fig = {
        "schema": history.FIGURES_SCHEMA,
        "figures_version": sorted(Catalogue.shipped().figures()),
        "commit": "c03",
        "commit_time": PAYLOADS[1],
        "counts": {"pass": 1},
        "figures": {},
    }
    (hist / "c03" / "figures.json").write_text(json.dumps(fig))
    later = time.time() + 5
    os.utime(hist / "c03" / "figures.json", (later, later))
    merged = merged_doc.merge([("run", _commit_rows(2.0))], "c04")
    merged["counts"]["pass"] = PAYLOADS[0]  # markup where a count belongs
    (hist / "c04").mkdir()
    (hist / "c04" / "merged.json").write_text(json.dumps(merged))
    (hist / "broken").mkdir()
    (hist / "broken" / "merged.json").write_text("{not json")
    out = history.render_index(hist)
    html = out.read_text()
    _assert_inert(html)
    assert 'href="c00/index.html"' in html and 'href="c01/index.html"' in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # the module name is shown, escaped
    err = capsys.readouterr().err
    assert (
        'href="c03/index.html"' in html and "&quot;&gt;&lt;script&gt;" in html
    )  # its commit time, escaped
    for folder in ("javascript:alert(1)", "plain", "c04", "broken"):
        assert f"history folder {hist / folder} skipped" in err
    assert "Traceback" not in err


def test_the_index_escapes_counts_and_commit_times():
    commits = [
        {
            "commit": "c00",
            "commit_time": PAYLOADS[1],
            "counts": {"pass": PAYLOADS[0], "fail": 1},
            "figures": {},
        }
    ]
    html = history.index_page(commits)
    _assert_inert(html)
    assert "&lt;img" in html and "&#34;&gt;&lt;script&gt;" in html


def test_a_report_with_a_bad_history_folder_still_succeeds(tmp_path, run_cli):
    hist = tmp_path / "hist"
    _add(hist, "c00")
    (hist / "junk").mkdir()
    (hist / "junk" / "merged.json").write_bytes(b"\xff\xfe")
    proc = run_cli(
        "report", hist / "c00", "--out", tmp_path / "html", "--history", hist, "--commit", "c01"
    )
    assert proc.returncode == 0, proc.stderr
    assert "junk skipped" in proc.stderr and "Traceback" not in proc.stderr
    assert 'href="c01/index.html"' in (hist / "index.html").read_text()
