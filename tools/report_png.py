"""docs/report.png from real results: render `mlagate report SOURCE...` into a temporary folder,
open its commit page in headless chromium (Debian's chromium and chromium-driver, driven by
Selenium as tests/test_report_browser.py drives them) and save the top of the page.

    python tools/report_png.py /tmp/fd-run [--out docs/report.png] [--width 1400] [--height 1600]

$MLAGATE_CHROMIUM and $MLAGATE_CHROMEDRIVER name another browser and driver. docs/report.md
says which run the committed picture shows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from mlagate.report import build


def _program(env: str, name: str) -> str:
    found = os.environ.get(env) or shutil.which(name) or f"/usr/bin/{name}"
    if not Path(found).exists():
        sys.exit(
            f"report_png: {name} not found (apt-get install chromium chromium-driver, or ${env})"
        )
    return found


def screenshot(page: Path, out: Path, width: int, height: int) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = _program("MLAGATE_CHROMIUM", "chromium")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
        "--force-color-profile=srgb",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(
        service=Service(_program("MLAGATE_CHROMEDRIVER", "chromedriver")), options=opts
    )
    try:
        driver.set_window_size(width, height)
        driver.get(page.resolve().as_uri())
        driver.execute_script("return document.readyState")
        out.write_bytes(driver.get_screenshot_as_png())
    finally:
        driver.quit()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sources", nargs="+", type=Path, help="run folders, archives or merged.json")
    p.add_argument("--out", type=Path, default=Path("docs/report.png"))
    p.add_argument("--width", type=int, default=1400)
    p.add_argument("--height", type=int, default=1600)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mlagate-report-png-") as tmp:
        outcome = build.build(args.sources, Path(tmp) / "report")
        screenshot(outcome.out / "index.html", args.out, args.width, args.height)
        counts = outcome.merged["counts"]
    print(f"wrote {args.out} ({args.width} x {args.height}) from {sum(counts.values())} results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
