"""The real-agent tier's registry trap and the install step's extras (no agent is started)."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .conftest import RegistryTrap
from .install import (
    MARKER_NAME,
    TRAPPED_REGISTRY_ENV,
    agent_executable,
    agent_prefix,
    install_env,
    is_installed,
)


def test_every_test_sees_the_trap_as_its_registry(registry_trap: RegistryTrap) -> None:
    assert os.environ["npm_config_registry"] == registry_trap.url
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(registry_trap.url + "@opencode-ai%2fplugin", timeout=5)
    assert err.value.code == 503
    assert registry_trap.requests == ["GET /@opencode-ai%2fplugin"]


def test_the_install_step_uses_the_registry_from_before_the_trap(
    registry_trap: RegistryTrap, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = os.environ[TRAPPED_REGISTRY_ENV] or None  # set by the trap: "" when none was
    assert install_env().get("npm_config_registry") == before != registry_trap.url
    monkeypatch.setenv(TRAPPED_REGISTRY_ENV, "http://127.0.0.1:4873/")
    env = install_env()
    assert env["npm_config_registry"] == "http://127.0.0.1:4873/"
    assert TRAPPED_REGISTRY_ENV not in env
    monkeypatch.setenv(TRAPPED_REGISTRY_ENV, "")
    assert "npm_config_registry" not in install_env()


def test_opencode_is_installed_only_with_its_config_deps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MADOHUB_AGENT_CACHE", str(tmp_path))
    exe = agent_executable("opencode", "1.18.33")
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    (agent_prefix("opencode", "1.18.33") / MARKER_NAME).write_text("opencode-ai@1.18.33\n")
    assert not is_installed("opencode", "1.18.33")  # @opencode-ai/plugin is missing
    deps = agent_prefix("opencode", "1.18.33") / "config-deps"
    deps.mkdir()
    (deps / MARKER_NAME).write_text("@opencode-ai/plugin@1.18.33\n")
    assert is_installed("opencode", "1.18.33")
