"""specserver: verifies, stores and aggregates specatlas submissions."""

__version__ = "0.1.0"
