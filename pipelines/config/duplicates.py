"""The ``validation.duplicates`` section: exact-duplicate detection and its gates.

```yaml
validation:
  duplicates: true           # detect with every feature checked, no gate
  duplicates:                # or a mapping (detection is on)
    features: [text, label]  # the features compared (default: all); leave an id out
    max_fraction: 0.01       # rows equal to an earlier row, over all examples
    max_cross_split: 0       # rows of a split equal to a row of an earlier split
    dedupe: across_splits    # remove the later copies (within_split | across_splits)
    near_threshold: 10       # image sources: near-duplicate images within 10 bits of 64
                             # (the default; null turns the image hash off)
    near_views: true         # image sources: also hash four edge-trimmed windows of each
                             # image (finds every crop of up to 5%; the search costs more)
    max_near_cross_split: 0  # image pairs of different splits within the threshold
```

Off by default (absent, null or false). With ``dedupe`` the later copies
are removed before the shards are written, each a ``duplicate`` dead
letter, and the gates measure what is left. A limit of ``null`` turns that
gate off, so ``--set validation.duplicates.max_cross_split=null`` relaxes
it for one run. docs/duplicates.md describes what counts as a duplicate.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from ...schemas.duplicates import DEDUPE_MODES
from ...schemas.errors import ConfigError
from ...transforms.near_duplicates import DEFAULT_THRESHOLD, MAX_THRESHOLD
from ...schemas.features import FeatureSpec
from .keys import describe, section

__all__ = ["DuplicatesConfig", "parse_duplicates"]

_KEY = "validation.duplicates"
_KEYS = ("features", "max_fraction", "max_cross_split", "dedupe", "near_threshold",
         "near_views", "max_near_cross_split")


@dataclasses.dataclass(frozen=True)
class DuplicatesConfig:
    """features: the features compared, in schema order (None: all);
    max_fraction, max_cross_split: the gates' limits (None: off); dedupe:
    which later copies are removed (one of `DEDUPE_MODES`; None: none);
    near_threshold: image sources' near-duplicate threshold in bits (None:
    off); near_views: each image's hash also carries its views (windows and
    unsure bits, docs/near_duplicates.md); max_near_cross_split: its gate
    (None: off)."""

    features: tuple[str, ...] | None = None
    max_fraction: float | None = None
    max_cross_split: int | None = None
    dedupe: str | None = None
    near_threshold: int | None = DEFAULT_THRESHOLD
    near_views: bool = False
    max_near_cross_split: int | None = None


def _features(value: Any, specs: Sequence[FeatureSpec]) -> tuple[str, ...] | None:
    key = f"{_KEY}.features"
    if value is None:
        return None
    names = [spec.name for spec in specs]
    if not isinstance(value, list) or not value or not all(isinstance(n, str) for n in value):
        raise ConfigError(key, f"must be a non-empty list of feature names, not "
                          f"{describe(value)}")
    for name in value:
        if name not in names:
            raise ConfigError(key, f"there is no feature {name!r}; features: {', '.join(names)}")
    if len(set(value)) != len(value):
        raise ConfigError(key, "names a feature twice")
    return tuple(name for name in names if name in value)


def _fraction(value: Any) -> float | None:
    key = f"{_KEY}.max_fraction"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 <= value <= 1:
        raise ConfigError(key, f"must be a number between 0 and 1 (or null to turn the gate "
                          f"off), not {describe(value)}")
    return float(value)


def _count(value: Any, name: str = "max_cross_split") -> int | None:
    key = f"{_KEY}.{name}"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(key, f"must be a whole number 0 or more (or null to turn the gate "
                          f"off), not {describe(value)}")
    return value


def _threshold(value: Any) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)
                         and 0 <= value <= MAX_THRESHOLD):
        return value
    raise ConfigError(f"{_KEY}.near_threshold", f"must be a whole number of bits from 0 to "
                      f"{MAX_THRESHOLD} (or null to turn near-duplicate images off), not "
                      f"{describe(value)}")


def _views(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{_KEY}.near_views", f"must be true or false, not {describe(value)}")


def _dedupe(value: Any) -> str | None:
    if value is None or value in DEDUPE_MODES:
        return value
    raise ConfigError(f"{_KEY}.dedupe", f"must be {' or '.join(DEDUPE_MODES)} (or null to keep "
                      f"every row), not {describe(value)}")


def parse_duplicates(value: Any, specs: Sequence[FeatureSpec]
                     ) -> tuple[DuplicatesConfig | None, Any]:
    """(DuplicatesConfig, or None when detection is off; the section as
    resolved for the manifest)."""
    if value is None or value is False:
        return None, None
    if value is True:
        value = {}
    data = section(value, _KEY, _KEYS, required=False)
    config = DuplicatesConfig(features=_features(data.get("features"), specs),
                              max_fraction=_fraction(data.get("max_fraction")),
                              max_cross_split=_count(data.get("max_cross_split")),
                              dedupe=_dedupe(data.get("dedupe")),
                              near_threshold=_threshold(data.get("near_threshold",
                                                                 DEFAULT_THRESHOLD)),
                              near_views=_views(data.get("near_views", False)),
                              max_near_cross_split=_count(data.get("max_near_cross_split"),
                                                          "max_near_cross_split"))
    return config, {"features": list(config.features) if config.features else None,
                    "max_fraction": config.max_fraction,
                    "max_cross_split": config.max_cross_split,
                    "dedupe": config.dedupe, "near_threshold": config.near_threshold,
                    "near_views": config.near_views,
                    "max_near_cross_split": config.max_near_cross_split}
