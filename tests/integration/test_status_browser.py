"""`/status` in a real headless Chromium (Debian's `chromium` and `chromium-driver`,
Selenium from PyPI; issue 14): a gateway process, a device on the MicroPython unix port
registered with it, a subscription whose consumer is down (a backlog) and a pull point;
the page shows all three, refreshes itself, and a screenshot is saved under the test's
tmp dir (README's picture is one of these)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from devtest import Client, DeviceProcess
from gwtest import FULL, WSA, call, subscribe_body, topic_filter

from tests.polling import until

pytestmark = pytest.mark.timeout(180)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEV = 'xmlns:dev="urn:wsn-edge:devices"'
DOWN = "http://127.0.0.1:9/consumer"  # nothing listens: deliveries fail, the backlog grows
BROWSER_WAIT: dict[str, float] = {"timeout": 20.0, "every": 0.2}  # a page load is slow


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        why = "chromium/chromium-driver are not installed: bash scripts/setup.sh --browser"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM  # with both paths given, selenium-manager stays offline
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1000",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-quic",
                f"--user-data-dir={tmp_path / 'chromium-profile'}"):  # fmt: skip
        o.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
    try:
        yield driver
    finally:
        driver.quit()


async def test_status_page_in_headless_chromium(
    gateway_process: Callable[..., Any],
    start_device: Callable[..., DeviceProcess],
    browser: Any,
    tmp_path: Path,
) -> None:
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
        WebDriverException,
    )
    from selenium.webdriver.common.by import By

    gw = gateway_process("--backoff-initial", "0.2", "--backoff-max", "1")
    dev = start_device(gateway=gw.url, gateway_retry_s=0.3, gateway_timeout_s=2)
    base = gw.url.rsplit("/wsn/", 1)[0]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
        client = Client(dev, s)
        await until(
            lambda: _registered(client), "the device registered with the gateway", **BROWSER_WAIT
        )
        # the gateway subscribes at the device, then pauses while nobody wants temperature:
        # not paused in between, so waiting for "pushing" below could pass before the pause
        await until(
            lambda: _temperature_paused(client, True), "the device's temperature paused",
            **BROWSER_WAIT,
        )  # fmt: skip
        pp = await call(gw.url, "<wsnt:CreatePullPoint/>")
        pp_addr = pp.body.findtext(f".//{{{WSA}}}Address") or ""
        pp_id = pp_addr.rsplit("/", 1)[1]
        every = topic_filter("dev:*/temperature", FULL, DEV)
        r = await call(gw.url, subscribe_body(pp_addr, every))
        assert not r.is_fault, r.text
        r = await call(gw.url, subscribe_body(DOWN, every))
        assert not r.is_fault, r.text
        down_id = (r.body.findtext(f".//{{{WSA}}}Address") or "").rsplit("/", 1)[1]
        # demand exists now: the gateway resumes the device's temperature subscription
        await until(
            lambda: _temperature_paused(client, False), "the device pushing temperature",
            **BROWSER_WAIT,
        )  # fmt: skip
        assert await client.sample("temperature", count=3) == 3
        await until(lambda: _accepted(s, base, 3), "three readings at the gateway", **BROWSER_WAIT)

        # read the rows from a page that stays put (a reload mid-read makes elements stale)
        browser.get(f"{base}/status?refresh=3600")
        regs = browser.find_element(By.ID, "registrations")
        row = regs.find_element(By.XPATH, ".//tr[td[contains(., 'dev-test')]]")
        assert dev.producer in row.text and "dev-test/temperature" in row.text
        assert "pushing" in row.text
        sub_row = browser.find_element(By.CSS_SELECTOR, f'#subscriptions tr[data-id="{down_id}"]')
        cells = [c.text for c in sub_row.find_elements(By.TAG_NAME, "td")]
        assert cells[0].startswith(DOWN) and "dev:*/temperature" in cells[1]
        assert cells[3] == "3", cells  # the backlog
        pp_row = browser.find_element(By.CSS_SELECTOR, f'#pullpoints tr[data-id="{pp_id}"]')
        assert [c.text for c in pp_row.find_elements(By.TAG_NAME, "td")][1] == "3"  # depth
        assert "lag behind the store" in browser.find_element(By.ID, "landing").text

        # it refreshes itself: a fourth reading shows up without the test reloading
        browser.get(f"{base}/status?refresh=1")
        assert await client.sample("temperature") == 1

        def depth_is_4() -> bool:
            try:
                return bool(
                    browser.find_element(
                        By.CSS_SELECTOR, f'#pullpoints tr[data-id="{pp_id}"] td:nth-child(2)'
                    ).text
                    == "4"
                )
            except (StaleElementReferenceException, NoSuchElementException):
                return False  # caught between two loads of the page: look again
            except WebDriverException as e:
                # the same race, as chromedriver words it when the node went with the old
                # page under a loaded machine's slower reads
                if "does not belong to the document" in str(e):
                    return False
                raise

        await until(depth_is_4, "the page to refresh itself", **BROWSER_WAIT)
        shot = tmp_path / "status.png"
        assert browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        keep = os.environ.get("WSN_STATUS_SCREENSHOT")  # to refresh README's picture
        if keep:
            shutil.copy(shot, keep)


async def _registered(client: Client) -> bool:
    st = await client.status()
    return bool(st.get("gateway") and st["gateway"].get("state") == "registered")


async def _temperature_paused(client: Client, want: bool) -> bool:
    """Whether the gateway's temperature subscription at the device is there and paused
    (`want` True) or pushing (False)."""
    return await client.subscription_paused(want, lambda x: "temperature" in str(x["topics"]))


async def _accepted(s: aiohttp.ClientSession, base: str, n: int) -> bool:
    async with s.get(base + "/status.json") as r:
        return bool((await r.json())["gateway"]["accepted"] >= n)
