"""specsubmit: run the specbench trial protocol against a local Ollama and submit it."""

__version__ = "0.1.0"
