"""The Prism profile: `runner-args prism` names the binary `install-prism` caches."""

import importlib.metadata
import os

import pytest

from recordforge.pipelines import cli, prism
from recordforge.pipelines.config import load_runner_profile
from recordforge.schemas.errors import ConfigError


def test_the_cached_binary_is_per_beam_version(tmp_path):
    environ = {"RECORDFORGE_CACHE_DIR": str(tmp_path)}
    version = importlib.metadata.version("apache-beam")
    assert prism.binary_path(environ=environ) == str(tmp_path / "prism" / f"v{version}" / "prism")
    assert prism.cache_dir({"XDG_CACHE_HOME": "/x"}) == "/x/recordforge"


def test_the_profile_names_the_cached_binary_once_installed(tmp_path):
    environ = {"RECORDFORGE_CACHE_DIR": str(tmp_path)}
    with pytest.raises(ConfigError, match="recordforge install-prism"):
        load_runner_profile("prism", environ=environ)
    binary = prism.binary_path(environ=environ)
    os.makedirs(os.path.dirname(binary))
    with open(binary, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(binary, 0o755)
    args = load_runner_profile("prism", environ=environ)
    assert args[:2] == ["--runner=PrismRunner", f"--prism_location={binary}"]
    # The user's variable wins over the cache.
    args = load_runner_profile("prism", environ={**environ, "RECORDFORGE_PRISM": "/opt/prism"})
    assert "--prism_location=/opt/prism" in args


def test_runner_args_exits_2_when_prism_is_not_installed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RECORDFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("RECORDFORGE_PRISM", raising=False)
    assert cli.main(["runner-args", "prism"]) == 2
    assert "install-prism" in capsys.readouterr().err


def test_install_reports_a_failed_go_build(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RECORDFORGE_CACHE_DIR", str(tmp_path))
    go = tmp_path / "go"
    go.write_text("#!/bin/sh\necho 'go: module lookup disabled' >&2\nexit 1\n")
    go.chmod(0o755)
    assert cli.main(["install-prism", "--go", str(go)]) == 1
    err = capsys.readouterr().err
    assert "module lookup disabled" in err and "exit 1" in err
    # Nothing half-made is left at the cached name.
    assert not os.path.exists(prism.binary_path())
