"""Every dashboard page in headless Chromium: no console errors, no network, all figures drawn.

Pages open from the file system (``file://``), as a downloaded site would, and load Plotly
from the site's own plotly.min.js.

Needs Debian's ``chromium`` and ``chromium-driver`` (apt) and ``selenium`` (pip, the
``test`` extra); skipped with the reason when one is missing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from equibench.dashboards.layout import PAGES, PLOTLY_JS
from equibench.dashboards.sample import synthetic_history, synthetic_results
from equibench.dashboards.site import write_site

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver",
                                reason="selenium is not installed (pip install selenium)")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("chromium and chromedriver are not installed "
                "(apt-get install chromium chromium-driver)", allow_module_level=True)

from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

# A headless browser per module: seconds to start and to draw every page.
pytestmark = pytest.mark.slow

# True once every Plotly div holds the SVG Plotly draws into (a failed plot leaves it empty).
ALL_DRAWN = """
const divs = Array.from(document.querySelectorAll('div.plotly-graph-div'));
return divs.length === arguments[0] && divs.every(d => d.querySelector('svg.main-svg'));
"""
# Choose the last entry of every dropdown, as a click would, and report what is shown.
USE_DROPDOWNS = """
const shown = [];
for (const gd of document.querySelectorAll('div.plotly-graph-div')) {
  const menus = gd.layout.updatemenus || [];
  if (!menus.length) continue;
  const buttons = menus[0].buttons;
  Plotly.restyle(gd, buttons[buttons.length - 1].args[0]);
  shown.push(gd.data.filter(t => t.visible !== false).length);
}
return shown;
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("browser-site")
    write_site(synthetic_results(), out, history=synthetic_history())
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    # An explicit driver path keeps Selenium Manager from looking for one on the network.
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.mark.parametrize("page", [p.file for p in PAGES])
def test_page_renders_offline_without_errors(browser, site, page):
    path = site / page
    figures = path.read_text().count("Plotly.newPlot(")
    browser.get_log("browser")  # start each page with empty logs
    browser.get_log("performance")
    browser.get(path.as_uri())
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(ALL_DRAWN, figures))
    shown = browser.execute_script(USE_DROPDOWNS)
    assert all(n > 0 for n in shown), f"{page}: a dropdown choice shows no trace"
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"{page}: console errors {errors}"
    requested = [json.loads(e["message"])["message"]["params"]["request"]["url"]
                 for e in browser.get_log("performance")
                 if '"Network.requestWillBeSent"' in e["message"]]
    remote = [u for u in requested if not u.startswith(("file:", "data:", "about:", "blob:"))]
    assert not remote, f"{page}: fetched {remote}"
    plotly = [u for u in requested if u.endswith(f"/{PLOTLY_JS}")]
    assert plotly == ([(site / PLOTLY_JS).as_uri()] if figures else []), page
    assert browser.find_element("css selector", "nav a.current").get_attribute("href") \
        .endswith(page)


def test_screenshot_of_the_overview(browser, site, tmp_path):
    """``equibench.dashboards.screenshot`` (docs/images/overview.png): the page's top, at
    the size asked for, as a PNG."""
    from equibench.dashboards.screenshot import capture

    out = capture(browser, site / "index.html", tmp_path / "overview.png", 600, 400)
    browser.set_window_size(1400, 1000)
    header = out.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")) \
        == (600, 400)
