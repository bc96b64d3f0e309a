#!/usr/bin/env bash
# Installs Debian's chromium for the headless browser test (tests/test_ui_browser.py), if it is missing.
# Playwright (the PyPI package) drives this system chromium; `playwright install` is never run.
# Needs root (apt-get). Idempotent: does nothing when /usr/bin/chromium is already there.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  echo "install_browser: /usr/bin/chromium already present ($(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown'))"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install_browser: installing chromium needs root (apt-get); run: sudo bash $0" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
echo "install_browser: installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
