"""specserver: verifies, stores and aggregates specbench submissions."""

__version__ = "0.1.0"
