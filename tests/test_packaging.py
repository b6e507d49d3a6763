"""Package metadata: an SPDX license with its file, classifiers and the project's URLs; a light import."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import tomllib
from conftest import REPO


def test_license_is_an_spdx_expression_with_its_file_and_a_new_enough_setuptools() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = meta["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License") and "the madohub_nb authors" in text
    (setuptools,) = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    assert int(re.search(r">=(\d+)", setuptools).group(1)) >= 77  # type: ignore[union-attr]
    # PEP 639: no License :: classifiers beside a license expression.
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    assert "Typing :: Typed" in project["classifiers"]


def test_project_urls_name_the_repository_of_the_binder_badge() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    badge = re.search(r"mybinder\.org/v2/gh/([\w.-]+/[\w.-]+)/", (REPO / "README.md").read_text())
    assert badge is not None
    assert project["urls"]["Source"] == f"https://github.com/{badge.group(1)}"
    assert all(url.startswith("https://") for url in project["urls"].values())


HEAVY_MODULES = ("pandas", "numpy", "matplotlib", "anthropic", "openai", "ipywidgets", "IPython")
"""Loaded when first used (a DataFrame, a plot, an AI transform, a widget), never by the import."""

_LOADED = f"""
import json, sys
import madohub_nb
before = [m for m in {HEAVY_MODULES!r} if m in sys.modules]
madohub_nb.RoundLog(":memory:").df  # the first DataFrame loads pandas
print(json.dumps({{"before": before, "pandas_after_df": "pandas" in sys.modules}}))
"""


def test_import_loads_no_heavy_library_until_it_is_used() -> None:
    """``import madohub_nb`` in a fresh interpreter leaves pandas, the SDKs and widgets unloaded."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _LOADED],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout)
    assert loaded["before"] == [], f"import madohub_nb loaded {loaded['before']}"
    assert loaded["pandas_after_df"], "RoundLog.df should load pandas when first used"
