"""The ``validation:`` section: statistics on or off, and the gates a build must pass to publish.

```yaml
validation:
  statistics: true           # compute stats.json (default); false also turns off drift and gates
  baseline: latest           # compare with the version LATEST names (default); a version
                             # name pins one; {last: N} the last N published versions
  max_row_change: 0.5        # relative change in examples per split vs the baseline
  features:
    label: {max_linf: 0.2}   # vocabulary and string features
    price: {max_js: 0.1, max_missing: 0.01, max_nonfinite: 0}
                             # numeric and bytes features; any feature; numeric features
  duplicates: {max_fraction: 0.01, max_cross_split: 0}
                             # exact duplicates (off by default; `config.duplicates`)
```

A limit of ``null`` turns that gate off, so ``--set
validation.features.price.max_js=null`` (or a larger number) relaxes one
gate for one run. Every mistake raises `ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from ...schemas.drift import Gate
from ...schemas.errors import ConfigError
from ...schemas.features import FeatureSpec
from ...schemas.stats import feature_kind
from ..publish.versions import check_version_name
from .duplicates import DuplicatesConfig, parse_duplicates
from .keys import describe, section

__all__ = ["ValidationConfig", "parse_validation"]

_KEYS = ("statistics", "baseline", "max_row_change", "features", "duplicates")
_FEATURE_KEYS = ("max_linf", "max_js", "max_missing", "max_nonfinite")
# More earlier versions than this is no longer a baseline but an archive
# read on every build.
MAX_BASELINE_VERSIONS = 100
# gate key -> (measure, the kinds of feature it applies to)
_FEATURE_GATES = {
    "max_linf": ("linf", ("vocabulary", "string")),
    "max_js": ("js", ("numeric", "bytes")),
    "max_missing": ("missing", ("numeric", "vocabulary", "string", "bytes")),
    "max_nonfinite": ("nonfinite", ("numeric",)),
}


@dataclasses.dataclass(frozen=True)
class ValidationConfig:
    """statistics: compute stats.json, drift.json and check the gates.
    gates: every configured gate (`schemas.drift.Gate`), in config order.
    baseline_version: the version compared with, pinned; baseline_last:
    compare with the last N published versions; both None: the version
    LATEST names. duplicates: exact-duplicate detection and its gates, or
    None (off)."""

    statistics: bool = True
    gates: tuple[Gate, ...] = ()
    baseline_version: str | None = None
    baseline_last: int | None = None
    duplicates: DuplicatesConfig | None = None


def _limit(value: Any, key: str, upper: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(key, f"must be a number (or null to turn the gate off), not "
                          f"{describe(value)}")
    if value < 0 or (upper is not None and value > upper):
        bounds = f"between 0 and {upper:g}" if upper is not None else "0 or more"
        raise ConfigError(key, f"must be {bounds}, not {value}")
    return float(value)


def _baseline(value: Any) -> tuple[str | None, int | None]:
    """(pinned version, last N) of ``validation.baseline``."""
    key = "validation.baseline"
    if value is None or value == "latest":
        return None, None
    if isinstance(value, str):
        try:
            check_version_name(value)
        except ConfigError as error:
            raise ConfigError(key, f"must be latest, a version name or {{last: N}}: "
                              f"{error.problem}") from None
        return value, None
    if isinstance(value, dict):
        last = section(value, key, ("last",), required=True).get("last")
        if isinstance(last, bool) or not isinstance(last, int) \
                or not 1 <= last <= MAX_BASELINE_VERSIONS:
            raise ConfigError(f"{key}.last", f"must be a whole number from 1 to "
                              f"{MAX_BASELINE_VERSIONS}, not {describe(last)}")
        return None, last
    raise ConfigError(key, f"must be latest, a version name (quote one that YAML reads as a "
                      f"number) or {{last: N}}, not {describe(value)}")


def parse_validation(value: Any, features: Sequence[FeatureSpec]) -> tuple[ValidationConfig,
                                                                           dict]:
    """(ValidationConfig, the section as resolved for the manifest)."""
    data = section(value, "validation", _KEYS, required=False)
    statistics = data.get("statistics", True)
    if not isinstance(statistics, bool):
        raise ConfigError("validation.statistics", f"must be true or false, not "
                          f"{describe(statistics)}")
    baseline_version, baseline_last = _baseline(data.get("baseline"))
    gates: list[Gate] = []
    row_change = _limit(data.get("max_row_change"), "validation.max_row_change", None)
    if row_change is not None:
        gates.append(Gate("validation.max_row_change", "row_change", row_change))
    by_name = {spec.name: spec for spec in features}
    per_feature = data.get("features")
    if per_feature is not None and not isinstance(per_feature, dict):
        raise ConfigError("validation.features", "must be a mapping of feature name to its "
                          "gates, e.g. {label: {max_linf: 0.2}}")
    for name, body in (per_feature or {}).items():
        key = f"validation.features.{name}"
        if name not in by_name:
            raise ConfigError(key, f"there is no feature {name!r}; features: "
                              f"{', '.join(by_name)}")
        gate_settings = section(body, key, _FEATURE_KEYS, required=True)
        kind = feature_kind(by_name[name])
        for gate_key, setting in gate_settings.items():
            limit = _limit(setting, f"{key}.{gate_key}", 1.0)
            if limit is None:
                continue
            measure, kinds = _FEATURE_GATES[gate_key]
            if kind not in kinds:
                other = next(k for k, (_, ks) in _FEATURE_GATES.items()
                             if kind in ks and k not in ("max_missing", "max_nonfinite"))
                raise ConfigError(f"{key}.{gate_key}", f"applies to {' and '.join(kinds)} "
                                  f"features; {name!r} is a {kind} feature: use {other}")
            gates.append(Gate(f"{key}.{gate_key}", measure, limit, name))
    if gates and not statistics:
        raise ConfigError("validation.statistics", "is false, but gates are configured; the "
                          "gates need statistics: remove the gates or set it to true")
    duplicates, duplicates_resolved = parse_duplicates(data.get("duplicates"), features)
    resolved = {"statistics": statistics,
                "baseline": (baseline_version or ({"last": baseline_last} if baseline_last
                                                  else "latest")),
                "max_row_change": row_change,
                "features": {name: dict(body) for name, body in (per_feature or {}).items()},
                "duplicates": duplicates_resolved}
    return ValidationConfig(statistics=statistics, gates=tuple(gates),
                            baseline_version=baseline_version,
                            baseline_last=baseline_last, duplicates=duplicates), resolved
