"""The dashboard in a real browser: a 1,000-run nightly history, synthesised
once per session from a committed run with changes planted in it, built
into a site and opened in headless Chromium from disk. A case's chart must
draw its points, and the red list must equal the CI gate's verdicts on the
same pairs of runs; the changes the gate fails between runs not fit to judge
must be listed, in grey, with their reasons."""

import html
import importlib.util
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.judging import analysis, history, regression, wall_gate
from harness.presenting import dashboard
from harness.results import summary
from impls.status import MISMATCH
from tests.helpers import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000"]
needs_chromium = pytest.mark.skipif(CHROMIUM is None,
                                    reason="Debian's chromium is not installed (make test installs it)")

RUNS = 1000
MAXPOOL = '{"C": 16, "H": 28, "N": 64, "W": 28, "k": 2}'  # one case of the default run


def _scale_module():
    spec = importlib.util.spec_from_file_location("dashboard_scale", ROOT / "benchmarks" / "dashboard_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def slower(strategy: str, factor: float = 3.0):
    def plant(meta, records, samples):
        for record in records:
            if record["strategy"] == strategy:
                for column in ("median_s", "iqr_s", "min_s", "mean_s"):
                    record[column] *= factor
                samples[record["case_id"]] = [value * factor for value in samples[record["case_id"]]]
    return plant


def both(*plants):
    def plant(meta, records, samples):
        for one in plants:
            one(meta, records, samples)
    return plant


def busy(meta, records, samples):
    meta["load_avg_start"] = [3.1, 2.0, 1.5]


def busy_ceiling(meta, records, samples):
    meta["ceiling_busy"] = {"cpu": "load 3.4 on 2 cores"}


def other_cpu(meta, records, samples):
    meta["hardware"] = dict(meta["hardware"], cpu_family_model="25-17", caches=dict(meta["hardware"]["caches"],
                                                                                     L2="512K"))


def rewritten(strategy: str):
    def plant(meta, records, samples):
        for record in records:
            if record["strategy"] == strategy:
                record["source"] = "added: rewritten"
    return plant


def broken(strategy: str):
    def plant(meta, records, samples):
        for record in records:
            if record["strategy"] == strategy:
                record.update(status=MISMATCH, message="planted", median_s=float("nan"), iqr_s=float("nan"))
                samples.pop(record["case_id"])
    return plant


def more_instructions(strategy: str, factor: float = 1.05):
    def plant(meta, records, samples):
        for record in records:
            if record["strategy"] == strategy:
                record["instructions"] *= factor
    return plant


def new_torch(meta, records, samples):
    meta["count_versions"] = dict(meta["count_versions"], torch="9.9.9")


# What the history holds, run by run (each run a copy of the one before, ±5 % per case).
STRATEGIES = ("torch_max_pool2d_indices", "numpy_sliding_window", "seed_reshape_max", "torch_reshape_argmax",
              "numba_fused")  # maxpool2d's reference and four more: enough partners to confirm against
PLANTS = {
    300: slower("numpy_sliding_window"),  # red
    350: slower("torch_max_pool2d_indices"),  # the reference: red too (the others, normalised by it, are not)
    400: more_instructions("seed_reshape_max"),  # red, on counts
    500: both(busy, slower("seed_reshape_max")),  # not judged: load
    600: both(busy_ceiling, slower("torch_reshape_argmax")),  # not judged: its ceiling measured busy
    700: both(other_cpu, slower("numpy_sliding_window")),  # another machine's first run: no pair (701 pairs with 699)
    800: both(rewritten("numba_fused"), slower("numba_fused")),  # source changed
    900: broken("torch_reshape_argmax"),  # red: broke
    950: both(new_torch, more_instructions("numba_fused")),  # counts not judged: other library versions
}


@pytest.fixture(scope="session")
def nightly(tmp_path_factory):
    """(site, runs in memory, seconds to synthesise, seconds to build): the
    1,000-run history and its site, made once per session."""
    scale = _scale_module()

    meta, records, samples = scale.read_source(
        keep=lambda row: row["params"] == MAXPOOL and row["strategy"] in STRATEGIES, max_samples=20)
    for number, record in enumerate(records):  # counts, constant from run to run as real ones are
        record["instructions"] = float(1_000_000 * (number + 1))
    meta["count_versions"] = {"valgrind": "3.19.0", "torch": "2.13.0"}
    root = tmp_path_factory.mktemp("nightly")
    started = time.perf_counter()
    kept: list = []
    scale.synthesise(root / "results", RUNS, source=(meta, records, samples), plants=PLANTS, collect=kept)
    synthesised = time.perf_counter() - started
    dashboard.build_dashboard(root / "results", root / "site", with_reports=False)
    built = time.perf_counter() - started - synthesised
    return root / "site", kept, synthesised, built


def same_machine_pairs(runs):
    """Each run with the latest earlier run on the same CPU (by its recorded
    family-model, not through the suite's grouping)."""
    latest = {}
    for run in runs:
        machine = run[0]["hardware"]["cpu_family_model"]
        if machine in latest:
            yield latest[machine], run
        latest[machine] = run


def gate_verdicts(runs) -> dict[str, set]:
    """The CI gate's verdicts on each pair of consecutive runs of a machine, from their
    raw samples (`history.gate_table`: the gate's screen and its
    confirmation, on the stored run where the gate re-measures), and counts
    by their factor. Each failing change goes to "red" when
    `analysis.unfit_reasons` finds nothing against the pair, to "grey"
    (not judged) when it does, and to "source" when the strategy's source
    changed. No screening from summaries, no cache: what the site must match."""
    rule = history.gate_rule(wall_gate.DEFAULT_GATE_FACTOR)
    found = {"red": set(), "grey": set(), "source": set()}
    for (base_meta, base_records, base_samples), (meta, records, samples) in same_machine_pairs(runs):
        base_rows, rows = pd.DataFrame(base_records), pd.DataFrame(records)
        table = history.gate_table(base_rows, base_samples, rows, samples, rule)
        failing = {(case, "time") for case in table.loc[table["verdict"].isin(regression.FAILING), "case_id"]}
        base_counts = dict(zip(base_rows["case_id"], base_rows["instructions"]))
        for case, count in zip(rows["case_id"], rows["instructions"]):
            if regression.count_verdict(base_counts[case], count)[1] == regression.REGRESSED:
                failing.add((case, "instructions"))
        base_source = dict(zip(base_rows["case_id"], base_rows["source"]))
        sources = dict(zip(rows["case_id"], rows["source"]))
        for case, metric in failing:
            reasons = analysis.unfit_reasons(base_meta, base_rows, meta, rows, metric)
            kind = "source" if base_source[case] != sources[case] else "grey" if reasons else "red"
            found[kind].add((case, base_meta["run_id"], meta["run_id"], metric))
    return found


def _open(url: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=180)


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if "CONSOLE" in line or "Uncaught" in line or "ERR_FILE_NOT_FOUND" in line]


def _listed(dom: str, list_id: str) -> set:
    match = re.search(rf'<ul id="{list_id}">(.*?)</ul>', dom, re.S)
    assert match, f"no list {list_id} in the page"
    attributes = ("data-case", "data-base", "data-new", "data-metric")
    return {tuple(html.unescape(re.search(f'{name}="([^"]*)"', item).group(1)) for name in attributes)
            for item in re.findall(r"<li [^>]*>", match.group(1))}


@pytest.mark.slow
@needs_chromium
def test_the_red_list_is_the_gates_verdicts_on_the_same_pairs(nightly, tmp_path):
    site, runs, _, _ = nightly
    expected = gate_verdicts(runs)
    # The plants are there, each where it belongs; nothing else is.
    assert {(case.split("|")[1], new) for case, _, new, _ in expected["red"]} == {
        ("numpy_sliding_window", "synthetic-00300"), ("torch_max_pool2d_indices", "synthetic-00350"),
        ("seed_reshape_max", "synthetic-00400"), ("torch_reshape_argmax", "synthetic-00900")}
    result = _open((site / "index.html").as_uri(), tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _listed(result.stdout, "red") == expected["red"]
    assert _listed(result.stdout, "not-judged") == expected["grey"]
    assert _listed(result.stdout, "source-changed") == expected["source"]
    text = html.unescape(result.stdout)
    for reason in ("load 3.1 on 2 cores", "ceiling measured busy", "different library versions (torch"):
        assert reason in text, reason
    pairs = re.search(r'<p id="pairs">(.*?)</p>', result.stdout, re.S).group(1)
    # 998 pairs (run 700, the other CPU's only run, has none; 701 pairs with 699);
    # not judged: 2 on load (either side), 2 on a busy ceiling (either side)
    assert "998 pairs of consecutive runs on one machine" in pairs
    assert "994 judged" in pairs and "4 not judged" in pairs and "different CPU" not in pairs
    assert _console_errors(result.stderr) == [], _console_errors(result.stderr)


@pytest.mark.slow
@needs_chromium
def test_a_case_chart_draws_every_point_of_its_history(nightly, tmp_path):
    site, runs, synthesised, built = nightly
    result = _open((site / "maxpool2d.html").as_uri() + "#verify", tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    charts = [dict(re.findall(r'data-([a-z]+)="([^"]*)"', chart))
              for chart in re.findall(r'<div class="chart" ([^>]*)>', result.stdout)]
    assert [chart.get("metric") for chart in charts] == [None, "instructions"]  # time, then the counts
    attributes = charts[0]
    timed = sum(1 for _, records, _ in runs for record in records if record["median_s"] == record["median_s"])
    assert int(attributes["points"]) == timed == RUNS * len(STRATEGIES) - 1  # the broken case has no time
    assert int(attributes["painted"]) == timed  # each point's centre painted on the canvas
    assert int(attributes["red"]) == 3 and int(attributes["grey"]) == 2  # rings on the changes of this case
    assert int(attributes["series"]) == 2 * len(STRATEGIES)  # a series per strategy and machine (run 700's CPU)
    assert result.stdout.count("<canvas") >= 2
    assert int(charts[1]["painted"]) == int(charts[1]["points"]) == timed + 1  # counts: the broken case has one
    assert int(charts[1]["red"]) == 1 and int(charts[1]["grey"]) == 1
    assert _console_errors(result.stderr) == [], _console_errors(result.stderr)
    size = sum(path.stat().st_size for path in site.rglob("*") if path.is_file())
    print(f"\n1,000-run site: synthesised in {synthesised:.1f} s, built in {built:.1f} s, {size / 1e6:.1f} MB")


@needs_chromium
def test_the_console_check_notices_a_broken_page(tmp_path):
    broken_page = tmp_path / "broken.html"
    broken_page.write_text("<html><body><img src='missing.png'><script>console.error('boom')</script></body></html>")
    result = _open(broken_page.as_uri(), tmp_path)
    assert _console_errors(result.stderr), "a missing image and console.error went unnoticed"


def test_the_data_scripts_load_from_disk_without_fetch(nightly_small):
    """file:// refuses fetch(): the pages must load their data as scripts."""
    site = nightly_small
    for page in site.glob("*.html"):
        text = page.read_text()
        assert "fetch(" not in text
        for link in re.findall(r"(?:href|src)='([^']+)'", text):
            assert (site / html.unescape(link)).exists(), (page.name, link)  # relative, works from disk
    script = (site / "assets" / "dashboard.js").read_text()
    assert "fetch(" not in script and "XMLHttpRequest" not in script
    assert (site / "assets" / "uPlot-LICENSE").read_text().startswith("The MIT License")


@pytest.fixture
def nightly_small(tmp_path):
    scale = _scale_module()
    meta, records, samples = scale.read_source(keep=lambda row: row["op"] == "maxpool2d" and row["params"] == MAXPOOL,
                                               max_samples=10)
    scale.synthesise(tmp_path / "results", 5, source=(meta, records, samples), plants={3: slower("seed_loops")})
    dashboard.build_dashboard(tmp_path / "results", tmp_path / "site", reports=1)
    return tmp_path / "site"


def test_summaries_carry_the_counts_the_rows_have(tmp_path):
    scale = _scale_module()
    meta, records, samples = scale.read_source(keep=lambda row: row["strategy"] == "numba_fused", max_samples=5)
    for record in records:
        record["instructions"] = 12345.0
    run = scale.synthesise(tmp_path, 1, source=(meta, records, samples))[0]
    found = json.loads((run / summary.SUMMARY).read_text())
    assert set(found["cases"]["instructions"]) == {12345.0}


@needs_chromium
def test_a_chart_groups_its_legend_by_machine_and_its_time_ticks_differ(tmp_path):
    """Runs hours apart on two machines: the old axis wrote one date under
    every run of a day, and the legend had a box per strategy and machine."""
    from .test_report import ENTRIES, fixture_run

    root = tmp_path / "results"
    for number in range(6):  # two hours apart, the last two on another machine
        fixture_run(root / f"r{number}", machine_cpu="Fixture CPU" if number < 4 else "Other CPU",
                    start_time=f"2026-11-22T{2 * number:02d}:00:00+00:00")
    dashboard.build_dashboard(root, tmp_path / "site", with_reports=False)
    result = _open((tmp_path / "site" / "maxpool2d.html").as_uri() + "#verify", tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _console_errors(result.stderr) == [], _console_errors(result.stderr)
    charts = [dict(re.findall(r'data-([a-z]+)="([^"]*)"', chart))
              for chart in re.findall(r'<div class="chart" ([^>]*)>', result.stdout)]
    assert len(charts) == 2  # the two sizes
    strategies = len(ENTRIES)
    for chart in charts:
        assert int(chart["series"]) == 2 * strategies  # a series per strategy and machine...
        assert int(chart["legend"]) == strategies + 2  # ...and a legend entry per strategy and per machine
        assert int(chart["toggled"]) == strategies  # the first machine's entry switches its series, all of them
        ticks = [tick for tick in html.unescape(chart["xticks"]).split("|") if tick]
        assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
    legend = re.search(r'<div class="legend">(.*?)</div></div>', result.stdout, re.S).group(1)
    assert html.unescape(legend).count("Other CPU") == 1


def test_the_overview_tells_a_cases_training_modes_apart(tmp_path):
    """A case timed forward and backward: two rows in the overview, each
    naming its mode (issue 40: the same op, strategy and params three times
    with nothing to tell them apart)."""
    scale = _scale_module()
    meta, records, samples = scale.read_source(
        keep=lambda row: row["params"] == MAXPOOL and row["strategy"] in STRATEGIES[:2], max_samples=10)
    backward = [dict(record, mode="backward", case_id=record["case_id"] + "|backward",
                     median_s=2 * record["median_s"]) for record in records]
    samples = dict(samples, **{record["case_id"]: [2 * value for value in samples[record["case_id"].rsplit("|", 1)[0]]]
                               for record in backward})
    scale.synthesise(tmp_path / "results", 2, source=(meta, records + backward, samples))
    index = dashboard.build_dashboard(tmp_path / "results", tmp_path / "site", with_reports=False).read_text()
    table = index.split("<table id='overview'>", 1)[1].split("</table>", 1)[0]
    header = re.findall(r"<th>([^<]*)</th>", table.split("</tr>", 1)[0])
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in table.split("</tr>")[1:] if "<td" in row]
    assert len(rows) == 2 * len(STRATEGIES[:2]) and header.index("mode") == header.index("dtype") + 1
    mode, strategy = header.index("mode"), header.index("strategy")
    for name in STRATEGIES[:2]:
        assert sorted(row[mode] for row in rows if row[strategy] == name) == ["backward", "forward"]
    assert len({tuple(row) for row in rows}) == len(rows)
