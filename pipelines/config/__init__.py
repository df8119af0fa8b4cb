"""Dataset configs and runner profiles: YAML in, frozen dataclasses out.

Modules, in the order a config is read:
    yaml_safe  YAML text -> plain data (safe loading, limits)
    overrides  ``--set key.path=value`` applied to the plain data
    keys       unknown keys refused with a did-you-mean hint
    dataset    the whole config -> `DatasetConfig` (load_config, config_from_dict)
    source     the ``source:`` section, checked against the files that are there
    image      the ``source.image:`` section
    output     the ``output:`` and ``dead_letter:`` sections, sizes
    paths      local paths and URLs
    validation the ``validation:`` section: statistics and gates
    cache      the ``cache:`` section: the build cache
    about      the ``dataset:`` section: description, license, citation
    model      the frozen dataclasses and defaults
    runners    runner profiles (``configs/runners/*.yaml``)

Every mistake raises `schemas.errors.ConfigError` naming the dotted key at
fault. Nothing here imports Beam.
"""

from .dataset import config_from_dict, load_config
from .model import (DEFAULT_SHARD_SIZE, IMAGE_COLUMNS, MIN_SHARD_SIZE, SOURCE_TYPES, ConfigWarning,
                    DatasetConfig, DeadLetterConfig, OutputConfig, SourceConfig)
from .output import parse_size
from .overrides import apply_override
from .runners import load_runner_profile, runner_profile_names
from .cache import CacheConfig
from .validation import ValidationConfig

__all__ = [
    "CacheConfig",
    "SOURCE_TYPES",
    "IMAGE_COLUMNS",
    "DEFAULT_SHARD_SIZE",
    "MIN_SHARD_SIZE",
    "ConfigWarning",
    "SourceConfig",
    "OutputConfig",
    "DeadLetterConfig",
    "DatasetConfig",
    "ValidationConfig",
    "load_config",
    "config_from_dict",
    "apply_override",
    "parse_size",
    "load_runner_profile",
    "runner_profile_names",
]
