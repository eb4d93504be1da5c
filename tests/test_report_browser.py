"""The report in a real headless browser: Debian's chromium driven by Selenium through
chromium-driver. Built from the committed reference runs of the default matrix (CPU and
H200). Locally the tests skip when the browser is missing; in CI (CI=true) they fail.

Screenshots go to $MLAGATE_SCREENSHOTS when set (else the test's temporary folder);
$MLAGATE_CHROMIUM and $MLAGATE_CHROMEDRIVER name the browser and driver when they are not
Debian's chromium and chromedriver on PATH.
"""

import io
import os
import shutil
from pathlib import Path

import pytest

from mlagate.report import build as report_build
from mlagate.report import merged as merged_doc
from mlagate.report import page as report
from mlagate.report.catalogue import Catalogue

from .test_report import MARKUP, REFERENCE, markup_rows, write_results


def _find(env: str, name: str) -> str | None:
    """$env when set (it must exist), else the program on PATH or in /usr/bin."""
    if os.environ.get(env):
        return os.environ[env] if Path(os.environ[env]).exists() else None
    return next(
        (p for p in (shutil.which(name), f"/usr/bin/{name}") if p and Path(p).exists()), None
    )


CHROMIUM = _find("MLAGATE_CHROMIUM", "chromium")
DRIVER = _find("MLAGATE_CHROMEDRIVER", "chromedriver")
# the page's verdict colours (the .v-* rules of report.CSS) and plot line colours (plots.PALETTE)
PASS, FAIL, INVALID = (26, 110, 60), (179, 38, 30), (240, 194, 75)
BLUE, RED = (31, 119, 180), (214, 39, 40)


def _missing() -> str | None:
    try:
        import PIL  # noqa: F401
        import selenium  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install -e '.[test]')"
    if not CHROMIUM or not DRIVER:
        return (
            "Debian's chromium and chromium-driver are not installed (apt-get install chromium "
            "chromium-driver; .ci/run does it)"
        )
    return None


@pytest.fixture(scope="module")
def browser():
    why = _missing()
    if why:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the browser test: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,2400",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
        "--force-color-profile=srgb",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


def open_page(driver, path: Path) -> list[dict]:
    """Load a page; return everything it wrote to the console (errors, warnings, logs)."""
    driver.get_log("browser")  # drop what an earlier page left
    driver.get(path.resolve().as_uri())
    driver.execute_script("return document.readyState")
    return driver.get_log("browser")


def pixels(png: bytes):
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    return img, img.getcolors(maxcolors=1 << 24)


def shots_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("MLAGATE_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_console_collection_catches_a_broken_page(browser, tmp_path):
    """The console check can fail: a planted script error and a missing image are reported."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body><img '
        'src="missing.png">'
        '<script>throw new Error("planted")</script></body></html>'
    )
    logs = open_page(browser, page)
    text = " ".join(e["message"] for e in logs)
    assert "planted" in text and "missing.png" in text and all(e["level"] == "SEVERE" for e in logs)


def test_reference_report_in_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By

    outcome = report_build.build(REFERENCE, tmp_path / "html", commit="reference")
    logs = open_page(browser, tmp_path / "html/index.html")
    assert logs == [], logs
    matrix = browser.find_element(By.ID, "verdict-matrix")
    assert matrix.is_displayed() and matrix.size["width"] > 600
    chips = matrix.find_elements(By.CSS_SELECTOR, "a.chip")
    assert len(chips) == len(outcome.merged["results"])
    assert {c.get_attribute("data-verdict") for c in chips} == {"pass", "fail", "invalid", "argued"}
    figures = browser.find_elements(By.CSS_SELECTOR, "figure.plot")
    assert len(figures) == len(outcome.plots)
    assert {f.get_attribute("data-plot") for f in figures} == {
        "marginal",
        "crossover",
        "equivalence",
        "throughput",
    }
    for f in figures:
        svg = f.find_element(By.TAG_NAME, "svg")
        assert svg.size["width"] >= 400 and svg.size["height"] >= 150, f.get_attribute("id")
        drawn = svg.find_elements(By.CSS_SELECTOR, ".series, .bar, .no-data")
        assert drawn, f"{f.get_attribute('id')}: nothing drawn"
    problems = browser.find_elements(By.CSS_SELECTOR, "#problems tr.problem")
    assert len(problems) == outcome.merged["counts"]["fail"] + outcome.merged["counts"]["invalid"]
    assert all(
        p.find_element(By.CSS_SELECTOR, "code.replay").text.startswith("mlagate run")
        for p in problems
    )
    assert browser.find_element(By.ID, "fingerprint").is_displayed()

    # the top of the page: verdict counts and the matrix
    browser.execute_script("window.scrollTo(0, 0)")
    top = browser.get_screenshot_as_png()
    (shots_dir(tmp_path) / "report-top.png").write_bytes(top)
    img, colours = pixels(top)
    assert (
        img.size == tuple(browser.execute_script("return [window.innerWidth, window.innerHeight]"))
        and img.size[1] > 1500
    )
    counts = dict((c, n) for n, c in colours)
    assert len(colours) > 50  # text, chips and rules, not a blank page
    assert sum(n for n, c in colours if c != (255, 255, 255)) > 0.05 * img.size[0] * img.size[1]
    for name, colour in (("pass", PASS), ("fail", FAIL), ("invalid", INVALID)):
        assert counts.get(colour, 0) > 200, f"the {name} colour is not on screen"

    # the marginal cost plots: the arms' lines in their colours
    browser.execute_script("document.getElementById('plots-marginal').scrollIntoView()")
    shot = browser.get_screenshot_as_png()
    (shots_dir(tmp_path) / "report-plots.png").write_bytes(shot)
    _, colours = pixels(shot)
    counts = dict((c, n) for n, c in colours)
    assert counts.get(BLUE, 0) > 300 and counts.get(RED, 0) > 300


def test_markup_in_a_module_name_is_text_in_the_dom(browser, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    src = write_results(tmp_path / "run", markup_rows())
    report_build.build([src], tmp_path / "html", commit="markup")
    logs = open_page(browser, tmp_path / "html/index.html")
    assert logs == [], logs
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018
    assert browser.execute_script("return [...document.scripts].map(s => s.id)") == ["copy-script"]
    assert (
        browser.execute_script("return document.querySelectorAll('#verdict-matrix b').length") == 0
    )
    cells = browser.find_elements(By.CSS_SELECTOR, "#verdict-matrix tbody th")
    assert {c.text for c in cells} == {MARKUP}
    assert MARKUP in browser.find_element(By.CSS_SELECTOR, "#problems .reason").text


def _rgb(css: str) -> tuple[float, ...]:
    return tuple(float(x) for x in css[css.index("(") + 1 : css.index(")")].split(",")[:3])


def contrast(fg: str, bg: str) -> float:
    """WCAG 2 contrast ratio of two CSS rgb() colours."""

    def lum(c):
        ch = [v / 255 for v in _rgb(c)]
        ch = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in ch]
        return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2]

    hi, lo = sorted((lum(fg), lum(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_contrast_ratio_can_fail():
    assert contrast("rgb(255, 255, 255)", "rgb(0, 0, 0)") == 21
    assert (
        contrast("rgb(255, 255, 255)", "rgb(240, 194, 75)") < 4.5
    )  # white on the invalid yellow would be unreadable


def test_replay_symbols_legend_and_matrix_fit(browser, tmp_path):
    from selenium.webdriver.common.by import By

    outcome = report_build.build(REFERENCE, tmp_path / "html", commit="reference")
    replays = {report.case_anchor(r["case_id"]): r["replay"] for r in outcome.merged["results"]}
    for width in (1400, 800):
        browser.set_window_size(width, 1600)
        assert open_page(browser, tmp_path / "html/index.html") == []
        inner = browser.execute_script("return window.innerWidth")
        assert browser.execute_script("return document.documentElement.scrollWidth") <= inner, (
            f"the page overflows at {width} px"
        )
        boxes = browser.find_elements(By.CSS_SELECTOR, "#verdict-matrix .matrix-box")
        assert {b.get_attribute("data-kind") for b in boxes} == {"correctness", "performance"}
        for box in boxes:
            right = browser.execute_script("return arguments[0].getBoundingClientRect().right", box)
            assert right <= inner, f"a matrix box leaves the page at {width} px"
            if width == 1400:
                fits = browser.execute_script(
                    "return arguments[0].scrollWidth <= arguments[0].clientWidth", box
                )
                assert fits, (
                    f"the {box.get_attribute('data-kind')} matrix does not fit its box at 1400 px"
                )
        browser.execute_script("window.scrollTo(0, 0)")
        (shots_dir(tmp_path) / f"report-{width}.png").write_bytes(browser.get_screenshot_as_png())
    rows = browser.find_elements(By.CSS_SELECTOR, "#problems tr.problem")
    assert rows
    for row in rows:
        assert (
            row.find_element(By.CSS_SELECTOR, "code.replay").text
            == replays[row.get_attribute("id")]
        )
        assert (
            row.find_element(By.CSS_SELECTOR, "button.copy").get_attribute("data-copy")
            == replays[row.get_attribute("id")]
        )
    symbols = {"pass": "\u2713", "fail": "\u2717", "invalid": "?", "argued": "\u2234"}
    looks = {k: v for k, v in report.VERDICT_SYMBOL.items() if k not in symbols}
    chips = browser.find_elements(By.CSS_SELECTOR, "#verdict-matrix a.chip")
    assert chips and all(
        c.text == {**symbols, **looks}[c.get_attribute("data-look")] for c in chips
    )
    for badge in browser.find_elements(By.CSS_SELECTOR, "#cases span.chip"):
        v = badge.get_attribute("data-verdict")
        assert badge.text == f"{symbols[v]} {report.VERDICT_WORD[v]}"
    legend = browser.find_element(By.ID, "legend").text
    assert all(
        f"{report.VERDICT_SYMBOL[v]} {w}" in legend
        for v, w in (
            ("pass", "pass"),
            ("regression", "regression"),
            ("expected", "expected fail"),
            ("invalid", "invalid"),
        )
    )
    for v in symbols:
        chip = browser.find_element(By.CSS_SELECTOR, f"#cases span.chip.v-{v}")
        fg, bg = (chip.value_of_css_property(p) for p in ("color", "background-color"))
        assert contrast(fg, bg) >= 4.5, f"{v}: {fg} on {bg}"
    for v in ("regression", "expected", "lost-control"):  # the outcome chips, in the legend
        chip = browser.find_element(By.CSS_SELECTOR, f"#legend span.chip.v-{v}")
        fg, bg = (chip.value_of_css_property(p) for p in ("color", "background-color"))
        assert contrast(fg, bg) >= 4.5, f"{v}: {fg} on {bg}"


def test_a_correctness_only_report_has_no_empty_plot_boxes(browser, tmp_path):
    from selenium.webdriver.common.by import By

    by_case = {  # a case in two reference archives: the later one (one file per case)
        r["case_id"]: r
        for src in REFERENCE
        for r in merged_doc.load_source(src)
        if Catalogue.shipped().kind(r["suite"]) == "correctness"
    }
    rows = list(by_case.values())
    report_build.build(
        [write_results(tmp_path / "run", rows)], tmp_path / "html", commit="correctness"
    )
    assert open_page(browser, tmp_path / "html/index.html") == []
    figures = browser.find_elements(By.CSS_SELECTOR, "figure.plot")
    assert figures and {f.get_attribute("data-plot") for f in figures} == {"equivalence"}, (
        "only the plots with data"
    )
    assert not browser.find_elements(
        By.CSS_SELECTOR, ".no-data, #plots-marginal, #plots-throughput"
    )
    boxes = browser.find_elements(By.CSS_SELECTOR, "#verdict-matrix .matrix-box")
    assert {b.get_attribute("data-kind") for b in boxes} == {"correctness"}

    probes = [r for r in rows if r["suite"] == "probes"]
    report_build.build(
        [write_results(tmp_path / "probes", probes)], tmp_path / "html2", commit="probes"
    )
    assert open_page(browser, tmp_path / "html2/index.html") == []
    assert browser.find_elements(By.CSS_SELECTOR, "figure.plot") == []
    assert browser.find_element(By.ID, "no-plots").is_displayed()
