"""LM Studio (`lms server start`), reached over its REST API; never started by specsubmit."""
