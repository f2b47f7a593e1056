"""llama-server (llama.cpp), started by specsubmit itself for each config of a run."""
