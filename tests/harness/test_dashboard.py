"""The dashboard built from real runs, then opened in headless Chromium."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.dashboard import build_dashboard
from harness.store import RunWriter, read_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """One real run of a tiny sweep; a second, its exact copy (A/A: nothing may be
    flagged); a third with one strategy made 1.5× slower and a hostile strategy
    name planted. Copies, not reruns: this machine's run-to-run noise is not
    what this test is about."""
    root = tmp_path_factory.mktemp("results")
    config = root.parent / "tiny.yaml"
    config.write_text("""
timing: {min_samples: 20, budget_s: 0.05, warmup_s: 0}
benchmarks:
  - op: maxpool2d
    strategies: [torch_max_pool2d_indices, numpy_sliding_window]
    params: {N: 1, C: 2, H: 8, W: 8, k: 2}
""")
    result = subprocess.run([sys.executable, "-m", "harness", "run", str(config), "-o", str(root / "run1"),
                             "--no-progress"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    meta, rows, samples = read_run(root / "run1")
    copy = RunWriter(root / "run2", dict(meta, run_id="run2", start_time="9998-01-01T00:00:00+00:00"))
    for record in rows.to_dict("records"):
        copy.append(record, samples[record["case_id"]])
    copy.close()
    meta = dict(meta, run_id="run3", start_time="9999-01-01T00:00:00+00:00")
    writer = RunWriter(root / "run3", meta)
    for record in rows.to_dict("records"):
        factor = 1.5 if record["strategy"] == "numpy_sliding_window" else 1.0
        record["median_s"] *= factor
        writer.append(record, [s * factor for s in samples[record["case_id"]]])
    hostile = dict(rows.to_dict("records")[0], case_id="hostile", strategy="<script>alert(1)</script>",
                   message="<img src=x onerror=alert(2)>")
    writer.append(hostile, [1e-3] * 5)
    writer.close()
    return root


def test_dashboard_pages_flag_the_regression_and_escape_text(history, tmp_path):
    index = build_dashboard(history, tmp_path / "site")
    text = index.read_text()
    assert "<table id='overview'>" in text
    assert "<script>" not in text and "&lt;script&gt;" in text
    page = (tmp_path / "site" / "maxpool2d.html").read_text()
    assert "Regressions between consecutive runs" in page and "numpy_sliding_window" in page
    assert "torch_max_pool2d_indices" not in page.split("Regressions")[1].split("</ul>")[0]
    plots = list((tmp_path / "site" / "plots").glob("*.png"))
    assert plots and all(p.stat().st_size > 5000 for p in plots)
    for link in re.findall(r"href='([^']+)'", text) + re.findall(r"src='([^']+)'", page):
        assert (tmp_path / "site" / link).exists(), link  # relative, works from disk


def _open(url: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=120)


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if "CONSOLE" in line or "Uncaught" in line or "ERR_FILE_NOT_FOUND" in line]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
def test_dashboard_renders_in_headless_chromium_without_console_errors(history, tmp_path):
    site = tmp_path / "site"
    build_dashboard(history, site)
    for page in ("index.html", "maxpool2d.html"):
        result = _open((site / page).as_uri(), tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        dom = result.stdout
        if page == "index.html":
            assert "<table" in dom and dom.count("<tr") >= 4
        else:
            assert dom.count("<img") >= 1
        assert _console_errors(result.stderr) == [], _console_errors(result.stderr)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
def test_the_console_check_notices_a_broken_page(tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><img src='missing.png'><script>console.error('boom')</script></body></html>")
    result = _open(broken.as_uri(), tmp_path)
    assert _console_errors(result.stderr), "a missing image and console.error went unnoticed"
