"""ratelimit."""
