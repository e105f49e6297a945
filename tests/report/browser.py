"""A real headless browser for the HTML reports' layout (issue 24, item 10): the page is loaded in
Chromium at a window width with a probe script appended, which lists what sticks out of the window
or out of its own box; the list comes back through `--dump-dom`. Only the test copy carries the
script: the reports themselves hold none."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

# Debian's package names the binary chromium; other systems chromium-browser or google-chrome.
BROWSER = next((path for name in ("chromium", "chromium-browser", "google-chrome")
                if (path := shutil.which(name)) is not None), None)

# The flags a closed network needs (no background connections), as root (no sandbox), no GPU.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")

# What overflows: the page wider than the window, an element past the window's right edge, an
# HTML element whose content is wider than its box. Inside a horizontal scroller (a wide table in
# its `.scroll` box) an element may be wider; inside an SVG the chart's own geometry decides.
PROBE = r"""<script>
(function () {
  const problems = [];
  const width = document.documentElement.clientWidth;
  const page = document.documentElement.scrollWidth;
  if (page > width + 1) problems.push('the page is ' + page + ' px wide in a ' + width + ' px window');
  const scrolled = (el) => {
    for (let up = el.parentElement; up; up = up.parentElement) {
      const overflow = getComputedStyle(up).overflowX;
      if (overflow === 'auto' || overflow === 'scroll') return true;
    }
    return false;
  };
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if (!box.width || scrolled(el) || (el.closest('svg') && el.tagName !== 'svg')) continue;
    const what = el.tagName.toLowerCase() + ' "' + el.textContent.trim().slice(0, 40) + '"';
    if (box.right > width + 1) problems.push(what + ' ends at ' + Math.round(box.right) + ' px');
    if (el.tagName !== 'svg' && getComputedStyle(el).overflowX === 'visible' && el.clientWidth > 0
        && el.scrollWidth > el.clientWidth + 1)
      problems.push(what + ' is ' + (el.scrollWidth - el.clientWidth) + ' px wider than its box');
  }
  document.body.setAttribute('data-layout-problems', JSON.stringify(problems));
})();
</script>"""


def layout_problems(page: str, width: int) -> list[str]:
    """What overflows when `page` is shown in a window `width` CSS pixels wide."""
    assert BROWSER is not None
    with tempfile.TemporaryDirectory() as folder:
        probe = Path(folder) / "page.html"
        probe.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
        shown = subprocess.run([BROWSER, *FLAGS, f"--user-data-dir={folder}/profile", f"--window-size={width},1000",
                                "--virtual-time-budget=3000", "--dump-dom", probe.as_uri()],
                               capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r'data-layout-problems="([^"]*)"', shown.stdout)
    assert found is not None, f"the browser showed no page (exit {shown.returncode}): {shown.stderr[-500:]}"
    return list(json.loads(html.unescape(found.group(1))))
