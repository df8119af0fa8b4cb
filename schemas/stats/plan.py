"""What a build's statistics cover: the kinds of feature, each feature's kind, and the plan of a build.

Kinds of feature (`feature_kind`):
    numeric     int64 and float without a vocabulary
    vocabulary  int64 with a vocabulary: exact counts per label
    string      string (UTF-8 text)
    bytes       bytes: statistics of the value lengths (images: encoded size)
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from ..features import FeatureSpec

__all__ = ["FORMAT", "KINDS", "StatisticsPlan", "feature_kind", "order_free"]

FORMAT = "recordforge.stats/1"
KINDS = ("numeric", "vocabulary", "string", "bytes")


def feature_kind(spec: FeatureSpec) -> str:
    """The kind of statistics a feature gets (see the module docstring)."""
    if spec.vocabulary is not None:
        return "vocabulary"
    if spec.stored_kind in ("int64", "float"):
        return "numeric"
    return "string" if spec.is_text else "bytes"


def order_free(kind: str) -> bool:
    """Whether partials of this kind merge to the same in any order and
    grouping: all but text, whose frequent values depend on the order."""
    return kind != "string"


@dataclasses.dataclass(frozen=True)
class StatisticsPlan:
    """What the statistics of a build need to know of each feature:
    (name, kind, stored type, is a list, vocabulary or None), in schema order."""

    features: tuple[tuple[str, str, str, bool, tuple[str, ...] | None], ...]

    @classmethod
    def from_specs(cls, specs: Sequence[FeatureSpec],
                   vocabularies: Mapping[str, Sequence[str]]) -> "StatisticsPlan":
        features = []
        for spec in specs:
            vocabulary = vocabularies.get(spec.name)
            if vocabulary is None and isinstance(spec.vocabulary, tuple):
                vocabulary = spec.vocabulary
            features.append((spec.name, feature_kind(spec), spec.stored_kind, bool(spec.shape),
                             tuple(vocabulary) if vocabulary is not None else None))
        return cls(tuple(features))
