"""Runner profiles: the Beam option sets shipped in ``configs/runners/``."""

from __future__ import annotations

import importlib.resources
import os
import re
from typing import Mapping

from ...schemas.errors import ConfigError
from .keys import check_keys
from .yaml_safe import safe_load

__all__ = ["load_runner_profile", "runner_profile_names"]

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")


def _prism_binary(environ: Mapping[str, str]) -> str:
    from .. import prism  # reads no Beam: the version comes from package metadata

    path = prism.binary_path(environ=environ)
    if not os.access(path, os.X_OK):
        raise ConfigError("", f"Prism is not installed at {path}: run `recordforge "
                          "install-prism` first (or set RECORDFORGE_PRISM to a Prism binary)")
    return path


# Variables a profile may use that recordforge knows when the environment
# does not set them: name -> function of the environment giving the value.
_PROVIDED = {"RECORDFORGE_PRISM": _prism_binary}


def runner_profile_names() -> list[str]:
    """Names of the runner profiles shipped in ``configs/runners/``."""
    folder = importlib.resources.files("recordforge.configs") / "runners"
    return sorted(entry.name[:-len(".yaml")] for entry in folder.iterdir()
                  if entry.name.endswith(".yaml"))


def load_runner_profile(name_or_path: str, environ: Mapping[str, str] | None = None
                        ) -> list[str]:
    """The Beam options of a runner profile, ready for `PipelineOptions`.

    name_or_path: a shipped profile name (``direct``, ``dataflow``, ...) or the
      path of a YAML file with an ``args:`` list of ``--flag=value`` strings.
    ``${VAR}`` in a flag is replaced by the environment variable VAR (from
    `environ`, default os.environ); an unset variable is a ConfigError.
    ``${VAR:-default}`` uses the default when VAR is unset or empty, and a flag
    left with an empty value (``--flag=``) is dropped, so Beam's own default applies.
    ``${RECORDFORGE_PRISM}``, when not set, is the Prism binary `recordforge
    install-prism` cached for the installed Beam version (a ConfigError
    when it is not installed).
    """
    environ = os.environ if environ is None else environ
    label = f"runner profile {name_or_path}"
    if os.sep in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        try:
            with open(name_or_path, encoding="utf-8") as f:
                text = f.read()
        except OSError as error:
            raise ConfigError("", f"cannot read {label}: {error.strerror or error}") from None
    else:
        resource = importlib.resources.files("recordforge.configs") / "runners" / \
            f"{name_or_path}.yaml"
        if not re.match(r"^[a-z0-9_-]+$", name_or_path) or not resource.is_file():
            raise ConfigError("", f"unknown {label}; shipped profiles: "
                              f"{', '.join(runner_profile_names())} (or give a file path)")
        text = resource.read_text(encoding="utf-8")
    data = safe_load(text, origin=label)
    if not isinstance(data, Mapping) or "args" not in data:
        raise ConfigError("args", f"{label} must be a mapping with an `args:` list of Beam "
                          "options")
    check_keys(data, ("description", "args"), "")
    args = data["args"]
    if not isinstance(args, list):
        raise ConfigError("args", f"{label}: must be a list of --flag=value strings")
    result = []
    for i, arg in enumerate(args):
        if not isinstance(arg, str) or not arg.startswith("--"):
            raise ConfigError(f"args[{i}]", f"{label}: {arg!r} is not a Beam option; write "
                              "--flag=value")

        def substitute(match: re.Match, i=i) -> str:
            var, default = match.group(1), match.group(3)
            if environ.get(var):
                return environ[var]
            if match.group(2) is not None:
                return default
            if var in _PROVIDED:
                return _PROVIDED[var](environ)
            raise ConfigError(f"args[{i}]", f"{label}: environment variable {var} is not "
                              f"set (needed by {arg})")

        expanded = _ENV_RE.sub(substitute, arg)
        if not expanded.endswith("="):
            result.append(expanded)
    return result
