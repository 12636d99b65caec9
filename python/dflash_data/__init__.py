"""dflash-data: chat datasets to DFlash training tokens, benchmarks on standard prompts, and
experiment trackers that follow a run's metrics.jsonl (the Python side of dflash.cpp)."""

__version__ = "0.1.0"
