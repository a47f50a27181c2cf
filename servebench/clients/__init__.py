"""Async inference clients behind one protocol (see `base`)."""
