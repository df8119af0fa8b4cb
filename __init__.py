"""recordforge: sharded, verified TFRecord datasets of tf.train.Example, built with Apache Beam.

The public API (docs/api.md)::

    import recordforge

    result = recordforge.build("configs/examples/flights.yaml",
                               overrides={"output.path": "out/flights"})
    rows | recordforge.WriteDataset(config, **{"output.path": url})
    p | recordforge.ReadDataset("out/flights", split="train")
    recordforge.load_config(path_or_dict)
    recordforge.verify(version_dir)

`recordforge.tf` (optional extra ``tf``) gives TensorFlow's parse spec and a
``tf.data`` dataset; `recordforge.torch` (extra ``torch``) PyTorch datasets
and `recordforge.grain` (extra ``grain``) a Grain data source, neither
needing TensorFlow (docs/reading.md). Names are loaded on first use, so ``import recordforge``
does not import Beam.

The repository root is this package: `schemas/` (what a row must be),
`transforms/` (where rows come from and the Beam steps they take),
`pipelines/` (what a build is, publishing, the command line) and `configs/`
(bundled configs and runner profiles) are its subpackages.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

# Absolute imports here only: test runners may import this file as a
# top-level module (pytest collects the repository root as a package named
# after its folder, which need not be a valid module name).
from recordforge.pipelines.version import __version__

# recordforge.torch and recordforge.grain live in frameworks/: a module
# named torch.py or grain.py at the repository root would shadow PyTorch or
# Grain for any Python started there (the tests, the benchmarks). A test
# runner importing this file as a plain module gives it no __path__.
if "__path__" in globals():
    __path__.append(os.path.join(os.path.dirname(__file__), "frameworks"))

if TYPE_CHECKING:
    from recordforge.pipelines.build import BuildResult, PipelineFailed, build
    from recordforge.pipelines.config import DatasetConfig, load_config
    from recordforge.pipelines.publish import BuildFailed, PublishError, VersionExistsError
    from recordforge.pipelines.publish.verify import VerifyReport, verify_dataset as verify
    from recordforge.pipelines.read_dataset import DatasetCorrupt, ReadDataset
    from recordforge.pipelines.write_dataset import WriteDataset, WriteDatasetResult
    from recordforge.schemas.errors import ConfigError

__all__ = [
    "BuildFailed",
    "BuildResult",
    "ConfigError",
    "DatasetConfig",
    "DatasetCorrupt",
    "PipelineFailed",
    "PublishError",
    "ReadDataset",
    "VerifyReport",
    "VersionExistsError",
    "WriteDataset",
    "WriteDatasetResult",
    "__version__",
    "build",
    "load_config",
    "verify",
]

# public name -> (module, attribute); loaded on first use (PEP 562).
_LAZY = {
    "build": ("pipelines.build", "build"),
    "BuildResult": ("pipelines.build", "BuildResult"),
    "PipelineFailed": ("pipelines.build", "PipelineFailed"),
    "load_config": ("pipelines.config", "load_config"),
    "DatasetConfig": ("pipelines.config", "DatasetConfig"),
    "BuildFailed": ("pipelines.publish", "BuildFailed"),
    "PublishError": ("pipelines.publish", "PublishError"),
    "VersionExistsError": ("pipelines.publish", "VersionExistsError"),
    "verify": ("pipelines.publish.verify", "verify_dataset"),
    "VerifyReport": ("pipelines.publish.verify", "VerifyReport"),
    "ReadDataset": ("pipelines.read_dataset", "ReadDataset"),
    "DatasetCorrupt": ("pipelines.read_dataset", "DatasetCorrupt"),
    "WriteDataset": ("pipelines.write_dataset", "WriteDataset"),
    "WriteDatasetResult": ("pipelines.write_dataset", "WriteDatasetResult"),
    "ConfigError": ("schemas.errors", "ConfigError"),
    "tf": ("tf", None),
    "torch": ("torch", None),
    "grain": ("grain", None),
}


def __getattr__(name: str) -> Any:
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'recordforge' has no attribute {name!r}") from None
    module = importlib.import_module(f"recordforge.{module_name}")
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
