"""send."""
