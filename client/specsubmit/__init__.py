"""specsubmit: run a specatlas trial protocol against a local inference engine and submit it."""

__version__ = "0.1.0"
