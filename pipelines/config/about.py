"""The ``dataset:`` section: what a published version says about itself to other readers.

```yaml
dataset:
  description: Flights of six carriers in 2023, one row per flight.
  license: https://creativecommons.org/licenses/by/4.0/   # a URL or an SPDX id
  citation: "@misc{flights2023, title={Flights}, year={2023}}"
```

Every key is optional text. They reach ``croissant.json`` (``description``,
``license``, ``citeAs``) and TFDS's ``dataset_info.json`` (``description``,
``citation``, ``redistributionInfo.license``) unchanged; the build does not
read them otherwise, so changing them leaves the build cache valid. Every
mistake raises `ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...schemas.errors import ConfigError
from .keys import describe, section

__all__ = ["AboutConfig", "parse_about"]

_KEYS = ("description", "license", "citation")


@dataclasses.dataclass(frozen=True)
class AboutConfig:
    """description: what the data is; license: its license (URL or SPDX id);
    citation: how to cite it (e.g. BibTeX). None when not given."""

    description: str | None = None
    license: str | None = None
    citation: str | None = None


def parse_about(value: Any) -> tuple[AboutConfig, dict]:
    """(AboutConfig, the section as resolved for the manifest)."""
    data = section(value, "dataset", _KEYS, required=False)
    texts = {key: _text(data.get(key), f"dataset.{key}") for key in _KEYS}
    return AboutConfig(**texts), texts


def _text(value: Any, key: str) -> str | None:
    if value is None:
        return None
    # An empty text would be published as an empty license or citation,
    # which readers take as "none"; leaving the key out says that honestly.
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be non-empty text (quote it in the YAML), not "
                          f"{describe(value)}; leave the key out when there is none")
    return value
