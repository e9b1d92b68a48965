r"""A PNG of the top of a site's page, as headless Chromium draws it (docs/images/overview.png).

    python -m equibench.dashboards.screenshot results/baselines/ci-cpu.parquet \
        docs/images/overview.png [--page index.html] [--size 1200x800]

builds the site of a result table in a temporary directory (no history: the Overview does
not draw it) and captures the first ``--size`` CSS pixels of the page once every figure is
drawn. Needs Debian's ``chromium`` and ``chromium-driver`` and ``selenium`` (the ``test``
extra), as ``tests/test_site_browser.py`` does; nothing is fetched from the network.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--disable-dev-shm-usage", "--force-device-scale-factor=1")
# True once every Plotly div holds the SVG Plotly draws into.
DRAWN = ("return Array.from(document.querySelectorAll('div.plotly-graph-div'))"
         ".every(d => d.querySelector('svg.main-svg'))")


@contextmanager
def chromium(width: int = 1200, height: int = 800) -> Iterator:
    """A headless Chromium (Selenium's driver) with its own throwaway profile."""
    from selenium import webdriver

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        raise RuntimeError("chromium and chromedriver are not installed "
                           "(apt-get install chromium chromium-driver)")
    with tempfile.TemporaryDirectory() as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in (*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}"):
            options.add_argument(flag)
        # An explicit driver path keeps Selenium Manager from looking for one on the network.
        driver = webdriver.Chrome(options=options,
                                  service=webdriver.ChromeService(executable_path=driver_path))
        try:
            driver.set_page_load_timeout(60)
            yield driver
        finally:
            driver.quit()


def capture(driver, page: Path, out: Path, width: int = 1200, height: int = 800) -> Path:
    """Open ``page`` and write the top ``width`` x ``height`` of it to ``out`` (PNG)."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.set_window_size(width, height)
    # The window holds the browser's frame too: grow it until the page sees the size.
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    driver.set_window_size(2 * width - inner[0], 2 * height - inner[1])
    driver.get(Path(page).resolve().as_uri())
    WebDriverWait(driver, 60).until(lambda d: d.execute_script(DRAWN))
    time.sleep(1.0)  # responsive figures settle to the window's width
    out.parent.mkdir(parents=True, exist_ok=True)
    if not driver.save_screenshot(str(out)):
        raise RuntimeError(f"no screenshot of {page}")
    return out


def main(argv: list[str] | None = None) -> int:
    import pandas as pd
    from equibench.dashboards.site import write_site

    from equibench import results

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", help="a result table (parquet)")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--page", default="index.html", help="the page of the site")
    parser.add_argument("--size", default="1200x800", help="WIDTHxHEIGHT in CSS pixels")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as site:
        index = write_site(results.read(args.results), site, history=pd.DataFrame())
        with chromium(width, height) as driver:
            capture(driver, index.parent / args.page, args.out, width, height)
    print(f"{args.out}: {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
