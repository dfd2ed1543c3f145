"""docs/ci/github-actions.yml, the workflow users copy: actionlint accepts it
(and rejects a broken copy, so the check can fail), and its jobs run the make
targets the README promises."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
WORKFLOW = ROOT / "docs" / "ci" / "github-actions.yml"
LINT_CONFIG = ROOT / "docs" / "ci" / "actionlint.yaml"


def actionlint_binary() -> str:
    found = shutil.which("actionlint", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                             os.environ.get("PATH", "")]))
    if found is None:
        pytest.skip("actionlint not installed (the test extra brings it: pip install -e '.[test]')")
    return found


def actionlint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([actionlint_binary(), "-no-color", "-config-file", str(LINT_CONFIG), str(path)],
                          capture_output=True, text=True, timeout=60)


def test_actionlint_accepts_the_workflow():
    result = actionlint(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_rejects_a_broken_copy(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("needs: dashboard", "needs: dashbord"))
    result = actionlint(broken)
    assert result.returncode == 1 and "dashbord" in result.stdout


def steps_text(job: dict) -> str:
    return "\n".join(str(step.get("run", "")) + str(step.get("uses", "")) for step in job["steps"])


def test_the_jobs_run_what_the_readme_promises():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers, jobs = workflow[True], workflow["jobs"]  # YAML 1.1 reads the key `on` as True
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]

    regress = jobs["regress"]
    assert "pull_request" in regress["if"]
    text = steps_text(regress)
    # both gates' baselines come from the target branch
    assert 'git checkout "origin/${BASE_REF}" -- results/baseline-quick results/baseline-counts' in text
    makefile = (ROOT / "Makefile").read_text()
    assert "COUNTS_BASELINE ?= results/baseline-counts" in makefile
    # hosted runners are not root, and the Makefile installs valgrind only as root
    assert "sudo apt-get install -y -qq valgrind gcc" in text
    assert text.index("valgrind gcc") < text.index("make regress")
    assert "make regress" in text and '>> "$GITHUB_STEP_SUMMARY"' in text
    # the summary picks the gate's own failing lines, and each gate's verdict line (or the count gate's skip)
    assert "grep -E '^FAIL ' regress.log" in text
    assert 'summary += f"\\nFAIL ' in (ROOT / "harness" / "judging" / "wall_gate.py").read_text()
    assert "grep -E '^counts: |count gate skipped' regress.log" in text
    count_gate = (ROOT / "harness" / "judging" / "count_gate.py").read_text()
    assert 'summary = (f"counts: ' in count_gate and 'f"regress: count gate skipped: ' in count_gate

    dashboard = jobs["dashboard"]
    assert "refs/heads/main" in dashboard["if"]
    assert "make dashboard" in steps_text(dashboard)
    # the site's cache kept between builds on main (warm builds), and kept out of the published site
    cache = next(step for step in dashboard["steps"] if "actions/cache" in step.get("uses", ""))
    assert cache["with"]["path"] == "dashboard-cache"
    assert "mv dashboard-cache site/.cache" in steps_text(dashboard)
    assert "mv site/.cache dashboard-cache" in steps_text(dashboard)
    upload = next(step for step in dashboard["steps"] if "upload-pages-artifact" in step.get("uses", ""))
    assert f"-o {upload['with']['path']}" in makefile.split("\ndashboard:")[1].split("\n\n")[0]
    publish = jobs["publish"]
    assert publish["needs"] == "dashboard" and publish["permissions"] == {"pages": "write", "id-token": "write"}
    assert "actions/deploy-pages" in steps_text(publish)

    gpu = jobs["gpu"]
    assert "self-hosted" in gpu["runs-on"] and "gpu" in gpu["runs-on"]
    assert "make gpu" in steps_text(gpu)
