#!/usr/bin/env bash
# The headless browser the HTML-report layout tests load the pages in (tests/report/browser.py).
# `make test` runs this: where no Chromium is on the PATH and this is a Debian-like machine run as
# root (CI), it installs Debian's chromium package; elsewhere it says that those tests will skip.
# KVPLAN_NO_BROWSER=1 skips the install.
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
    command -v "$name" >/dev/null 2>&1 && exit 0
done
if [ "${KVPLAN_NO_BROWSER:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the HTML-report layout tests (KVPLAN_NO_BROWSER=1 skips this)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q chromium >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null; }
    exit 0
fi
echo "no Chromium found: the HTML-report layout tests (tests/report/test_html_layout.py) will be skipped"
