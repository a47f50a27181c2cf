"""servebench: which model-serving setup meets a latency goal at the lowest cost."""

__version__ = "0.1.0"
