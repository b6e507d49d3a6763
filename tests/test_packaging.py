"""Package metadata: an SPDX license with its file, classifiers and the project's URLs."""

from __future__ import annotations

import re

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
