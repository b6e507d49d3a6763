"""Package metadata: an SPDX license with its file, classifiers and the project's URLs; a light import."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
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


BADGE = re.compile(r"mybinder\.org/v2/gh/([\w.-]+/[\w.-]+)/")


@pytest.mark.parametrize("page", ["README.md", "docs/index.md", "docs/getting-started.md"])
def test_project_urls_name_the_repository_of_the_binder_badge(page: str) -> None:
    """The README's badge and the docs site's (its home and getting-started pages) agree."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    badge = BADGE.search((REPO / page).read_text())
    assert badge is not None, f"{page} has no Binder badge"
    assert project["urls"]["Source"] == f"https://github.com/{badge.group(1)}", page
    assert all(url.startswith("https://") for url in project["urls"].values())


README_MAX_LINES = 250
"""The README is a landing page; the reference lives in the docs site (docs/, mkdocs.yml)."""


def test_readme_is_a_landing_page_whose_links_reach_the_docs() -> None:
    """Short, the two set-up commands in one block, and every local link names a file."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    (setup,) = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    assert [line.split("#")[0].strip() for line in setup.splitlines()] == ["make demo", "make test"]
    assert "make test" in (REPO / ".ci" / "run").read_text()
    links = [link for link in re.findall(r"\]\(([^)#]+)", text) if "://" not in link]
    assert any(link.startswith("docs/") for link in links)
    assert [link for link in links if not (REPO / link).is_file()] == []


HEAVY_MODULES = (
    "pandas", "numpy", "matplotlib", "anthropic", "openai", "ipywidgets", "IPython", "traitlets",
)  # fmt: skip
"""Loaded when first used (a DataFrame, a plot, an AI transform, a widget, the kernel's hub and
its ``%config MadoHub`` settings), never by the import."""

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
