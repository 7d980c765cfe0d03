"""Headless Chromium from Debian's packages, driven by Selenium: the report's
browser tests and the screenshots of the docs. Never downloads a browser:
the system's chromium and chromedriver, or a skip saying which is missing."""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# as root: no sandbox; nothing of the network (no QUIC, no updates, no sync)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1300,1000")
STEP_INSET_PX = 10


def missing() -> str | None:
    """Why the browser cannot run here, or None."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            return f"{path} missing (apt-get install {package}; make setup installs it)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium missing (pip install -e '.[test]')"
    return None


def start():
    """A driver on a fresh profile (removed by ``stop``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="report-chromium-")
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.profile_dir = profile
    return driver


def stop(driver) -> None:
    driver.quit()
    shutil.rmtree(driver.profile_dir, ignore_errors=True)


def open_page(driver, path: Path) -> float:
    """Load ``path``; seconds from navigation to the load event (scripts run, figures drawn)."""
    driver.get(Path(path).resolve().as_uri())
    return driver.execute_script(
        "return (performance.timing.loadEventEnd - performance.timing.navigationStart) / 1000")


def errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def slider_to(driver, div: str, step: int, timeout_s: float = 10.0) -> None:
    """Click the slider of figure ``div`` where step ``step`` sits, as a user does;
    returns once the figure shows that step."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    rail = driver.find_element(By.CSS_SELECTOR, f"#{div} .slider-rail-touch-rect")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", rail)
    n = driver.execute_script(f"return document.getElementById('{div}')"
                              "._fullLayout.sliders[0].steps.length")
    width = rail.size["width"]
    # the steps spread evenly over the rail inside plotly's stepInset (10 px) of its ends;
    # the offset is from the rail's centre
    x = STEP_INSET_PX + (width - 2 * STEP_INSET_PX) * step / max(n - 1, 1) - width / 2
    ActionChains(driver).move_to_element_with_offset(rail, int(round(x)), 0).click().perform()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if driver.execute_script(f"return document.getElementById('{div}')"
                                 "._fullLayout.sliders[0].active") == step:
            time.sleep(0.3)     # the frame's redraw (duration 0) after the slider moved
            return
        time.sleep(0.05)
    raise AssertionError(f"the slider of #{div} did not reach step {step}")


def trace(driver, div: str, name: str) -> dict:
    """The figure's shown trace ``name`` (x, y, text, customdata)."""
    return driver.execute_script(
        f"var t = document.getElementById('{div}').data.find(t => t.name === '{name}');"
        "return {x: t.x, y: t.y, text: t.text || null, customdata: t.customdata || null};")


def screenshot(driver, div: str, path: Path) -> bytes:
    from selenium.webdriver.common.by import By
    el = driver.find_element(By.ID, div)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
    png = el.screenshot_as_png
    Path(path).write_bytes(png)
    return png
