"""The native tests compare the extension with the Python reference; without it they skip."""

from __future__ import annotations

import pytest

try:
    from recordforge import _native
except ImportError as error:  # built without cargo: the Python path is the whole product
    _native = None
    _MISSING = str(error)


@pytest.fixture(scope="session")
def native():
    """The compiled kernels, whatever RECORDFORGE_PURE_PYTHON says (the
    tests compare both paths in one process)."""
    if _native is None:
        pytest.skip(f"the native extension is not built ({_MISSING})")
    return _native
