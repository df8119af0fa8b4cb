"""The recordforge version (read by setup.py and written into manifests)."""

__version__ = "0.1.0"
