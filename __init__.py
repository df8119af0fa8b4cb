"""recordforge: sharded, verified TFRecord datasets of tf.train.Example, built with Apache Beam.

The repository root is this package: `schemas/` (what a row must be),
`transforms/` (where rows come from and the Beam steps they take),
`pipelines/` (what a build is, publishing, the command line) and `configs/`
(bundled configs and runner profiles) are its subpackages.
"""

from .pipelines.version import __version__

__all__ = ["__version__"]
