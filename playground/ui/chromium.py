"""Debian's Chromium as the project drives it through Playwright (the browser tests, scripts/bench_overhead.py): its
path and the flags that keep a headless run off the GPU, the network and /dev/shm, without a sandbox (containers).
scripts/install_browser.sh installs it from apt; Playwright's own browser download is never used."""

PATH = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage")


def launch_chromium(playwright):
    """A headless Chromium from a started sync Playwright."""
    return playwright.chromium.launch(executable_path=PATH, args=list(FLAGS))
