"""page."""
