"""The ``cache:`` section: where a build keeps what it encoded, for the next build to reuse.

```yaml
cache:
  enabled: true              # default; false reads, checks and encodes every input
  path: null                 # default: <output.path>/.cache
  keep_unused_days: 0        # pieces the newest build did not use go after this many days
```

Every mistake raises `ConfigError` naming the key. docs/incremental.md
describes the cache.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ...schemas.errors import ConfigError
from .keys import describe, section

__all__ = ["CacheConfig", "parse_cache"]

_KEYS = ("enabled", "path", "keep_unused_days")


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    """enabled: reuse and write the build cache (table sources);
    path: its URL, None for ``<output.path>/.cache``;
    keep_unused_days: how long pieces the newest published build did not
    use (inputs changed or removed, another config) are kept."""

    enabled: bool = True
    path: str | None = None
    keep_unused_days: float = 0.0


def parse_cache(value: Any) -> tuple[CacheConfig, dict]:
    """(CacheConfig, the section as resolved for the manifest)."""
    data = section(value, "cache", _KEYS, required=False)
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError("cache.enabled", f"must be true or false, not {describe(enabled)}")
    path = data.get("path")
    if path is not None and (not isinstance(path, str) or not path.strip()):
        raise ConfigError("cache.path", f"must be a directory path or URL, not {describe(path)}")
    keep = data.get("keep_unused_days", 0)
    if (isinstance(keep, bool) or not isinstance(keep, (int, float)) or not math.isfinite(keep)
            or keep < 0):
        raise ConfigError("cache.keep_unused_days", f"must be a number of days, 0 or more, "
                          f"not {describe(keep)}")
    config = CacheConfig(enabled=enabled, path=path, keep_unused_days=float(keep))
    return config, {"enabled": enabled, "path": path, "keep_unused_days": keep}
