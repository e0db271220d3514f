"""``porter audit --format html`` in a real browser: Playwright driving the system's Chromium (Debian's
``chromium`` package, through its executable path; Playwright's own browser download is not used).

The page must render, its charts and totals must match ``--format json``, and its line links must
resolve to the audited files. Set PORTER_HTML_SCREENSHOT=/path.png to keep a screenshot of the page.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from cli_helpers import run_porter

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser")) if p), None)

SOURCES = {
    "train.py": "import torch\nfrom apex.optimizers import FusedAdam\nimport pynvml\n\n"
                "model = model.cuda()\nopt = FusedAdam(model.parameters(), lr=1e-3)\n"
                "name = torch.cuda.get_device_name(0)\nif 'A100' in name:\n    pass\n",
    "models/attn.py": "from flash_attn import flash_attn_func\n\n\n"
                      "def f(q, k, v):\n    return flash_attn_func(q, k, v, causal=True)\n",
    "dir with space/util.py": "import torch\nx = torch.zeros(2, device='cuda')\n" + "\n" * 97
                              + "import flash_attn  # line 100\n",
    "requirements.txt": "--extra-index-url https://download.pytorch.org/whl/cu121\ntorch==2.1.0+cu121\nflash-attn\n",
    "kernels/k.cu": "__global__ void k(float* x) {\n  float v = __shfl_xor_sync(0xffffffff, x[0], 16);\n"
                    "  x[threadIdx.x] = v;\n}\n",
}


def _tree(tmp: Path) -> Path:
    root = tmp / "proj"
    for rel, text in SOURCES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_html_is_self_contained(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    proc = run_porter("audit", "--format", "html", "--no-cache", str(root))
    assert proc.returncode == 0, proc.stderr
    page = proc.stdout.decode()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and not re.search(r"""(?:src|href)=["']https?://""", page)
    assert "<svg" in page and 'id="file-table"' in page
    # written to stdout, links point at the audited tree through file:// URIs
    assert f'href="{root.resolve().as_uri()}/train.py#L' in page


@pytest.mark.slow  # a browser start; CI's slow tier runs it after installing playwright
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH (Debian: apt-get install chromium)")
def test_html_report_in_a_browser(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    root = _tree(tmp_path)
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    report = out_dir / "audit.html"
    proc = run_porter("audit", "--format", "html", "-o", str(report), "--no-cache", str(root))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(run_porter("audit", "--format", "json", "--no-cache", str(root)).stdout)
    summary = doc["summary"]
    assert 'href="../proj/' in report.read_text(encoding="utf-8")  # relative to the report file

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("requestfailed", lambda req: errors.append(req.url))
            page.goto(report.as_uri())
            assert page.title() == "porter audit: proj"
            assert errors == []

            # summary cards = the JSON
            def card(key: str) -> str:
                return page.locator(f'.card[data-key="{key}"] .num').inner_text()

            assert int(card("total")) == len(doc["findings"]) == summary["total"]
            assert int(card("files_scanned")) == doc["files_scanned"] == summary["files_scanned"]
            for cls in ("replace", "shim", "benign"):
                assert int(card(cls)) == summary["by_category"][cls] == doc["counts"]["by_category"][cls]
            assert int(card("blockers")) == summary["blockers_total"]
            est = summary["estimate"]
            assert card("estimate") == f"{est['low_days']:g}–{est['high_days']:g}"

            # charts: every bar is drawn, with the JSON's value
            def bars(chart: str) -> dict[str, float]:
                out = {}
                for bar in page.locator(f"#{chart} rect.bar").all():
                    value = float(bar.get_attribute("data-value"))
                    box = bar.bounding_box()
                    assert box is not None and (box["width"] > 0) == (value > 0), (chart, value, box)
                    out[bar.get_attribute("data-label")] = value
                return out

            assert bars("chart-class") == {k: float(v) for k, v in summary["by_category"].items()}
            assert bars("chart-fix") == {k: float(v) for k, v in summary["by_fix"].items()}
            assert bars("chart-family") == {k: float(v) for k, v in summary["by_family"].items()}
            hours = bars("chart-hours")
            assert sum(hours.values()) == pytest.approx(est["site_hours"], abs=0.05)

            # per-file table: one row per file with findings, totals in the footer
            paths = {f["path"] for f in doc["findings"]}
            rows = page.locator("#file-table tbody tr")
            assert rows.count() == len(paths)
            assert {rows.nth(i).get_attribute("data-path") for i in range(rows.count())} == paths
            assert page.locator("#file-table tfoot td").nth(3).inner_text() == str(summary["total"])

            # every finding is listed with a link that resolves to its file
            links = page.locator("a.line")
            assert links.count() == len(doc["findings"])
            hrefs = [links.nth(i).evaluate("a => a.href") for i in range(links.count())]
            for href in hrefs:
                url = urlparse(href)
                assert url.scheme == "file" and re.fullmatch(r"L\d+", url.fragment), href
                assert Path(unquote(url.path)).resolve().is_file(), href
            targets = {(Path(unquote(urlparse(h).path)).resolve(), urlparse(h).fragment) for h in hrefs}
            expected = {((root / f["path"]).resolve(), f"L{f['line']}") for f in doc["findings"]}
            assert targets == expected
            line100 = next(h for h in hrefs if h.endswith("util.py#L100"))
            assert "dir%20with%20space/util.py" in line100

            shot = Path(os.environ.get("PORTER_HTML_SCREENSHOT") or tmp_path / "report.png")
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000

            # following a link opens the source file
            page.goto(line100)
            assert "import flash_attn  # line 100" in page.inner_text("body")
        finally:
            browser.close()
