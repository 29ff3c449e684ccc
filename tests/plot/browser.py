"""A headless Chromium for the HTML report's tests and screenshots, driven by selenium.

Debian's packages give the browser and its driver (``apt-get install chromium
chromium-driver``: /usr/bin/chromium, /usr/bin/chromedriver); selenium is told to use
both, so it never looks for or downloads a browser of its own. WebGL runs on SwiftShader
(the CPU), as a machine without a GPU has it; without the background-networking flags the
browser tries to reach the network at start and, on a closed network, fails.
"""

from __future__ import annotations

import base64
import io
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--hide-scrollbars",
)
WINDOW = (1400, 1000)
READY_S = 60  # a page draws in a few seconds; a loaded machine may take longer


def missing() -> str | None:
    """Why no browser test can run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.exists():
            return f"{path} not found (apt-get install {package})"
    return None


@contextmanager
def chromium(window: tuple[int, int] = WINDOW, page_load: str = "normal"):
    """A headless Chromium driver in a fresh profile, quit and removed afterwards;
    ``page_load="none"``: ``driver.get`` returns at once (then wait with ``drawn``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="pipesim-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={window[0]},{window[1]}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.page_load_strategy = page_load
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_script_timeout(READY_S)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def open_report(driver, path: Path) -> list[dict]:
    """Load the report at ``path``, wait until every figure is drawn, and return the
    browser's log entries of that load (console messages, failed loads)."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser")  # what an earlier page left
    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, READY_S).until(
        lambda d: d.execute_script("return document.body.dataset.ready || ''") != ""
    )
    state = driver.execute_script("return document.body.dataset.ready")
    log = driver.get_log("browser")
    assert state == "true", f"the page failed to draw: {log}"
    return log


POSITION = """
const gd = document.getElementById(arguments[0]);
gd.scrollIntoView({block: "center"});
const layout = gd._fullLayout, xa = layout[arguments[3]], ya = layout[arguments[4]];
const box = gd.getBoundingClientRect();
return [xa._offset + xa.d2p(arguments[1]) - box.width / 2,
        ya._offset + ya.d2p(arguments[2]) - box.height / 2];
"""
LABEL = """
const label = document.getElementById(arguments[0]).querySelector(".hoverlayer .hovertext");
return label ? label.textContent : null;
"""


def hover(driver, figure: str, x: float, y: float, axes=("xaxis", "yaxis")) -> str:
    """Move the mouse over data point ``(x, y)`` of the plotly figure ``figure`` (an
    element id) as a user would; the text of the hover label plotly then shows."""
    from selenium.webdriver.common.action_chains import ActionChains

    dx, dy = driver.execute_script(POSITION, figure, x, y, *axes)
    element = driver.find_element("id", figure)
    ActionChains(driver).move_to_element_with_offset(element, round(dx), round(dy)).perform()
    return wait(driver, lambda d: d.execute_script(LABEL, figure))


def click(driver, element) -> None:
    """A mouse click on ``element``, as a user would click it."""
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).move_to_element(element).click().perform()


def wait(driver, condition, seconds: float = 10):
    """``condition(driver)`` once it is true (selenium's wait: an error past ``seconds``)."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds).until(condition)


def drawn(driver, path: Path, limit_s: float = 1800) -> float:
    """Open ``path`` (in a driver with ``page_load="none"``) and return the seconds until
    the page says every figure is drawn (a large page may keep the browser busy for
    minutes when WebGL runs in software)."""
    start = time.perf_counter()
    driver.get(path.resolve().as_uri())
    while time.perf_counter() - start < limit_s:
        try:
            if driver.execute_script("return document.body && document.body.dataset.ready"):
                return time.perf_counter() - start
        except Exception:  # the page is busy: the driver's script call timed out
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{path}: not drawn in {limit_s:.0f} s")


def screenshot(driver, element_id: str | None = None) -> bytes:
    """A PNG of the window, or of one element (scrolled into view)."""
    if element_id is None:
        return driver.get_screenshot_as_png()
    element = driver.find_element("id", element_id)
    driver.execute_script("arguments[0].scrollIntoView()", element)
    return base64.b64decode(element.screenshot_as_base64)


def pixels(png: bytes):
    """The PNG as an RGB array (height, width, 3)."""
    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
