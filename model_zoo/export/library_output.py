"""Keep what torch prints off the user's terminal: a converter's output goes to a log file
beside what it writes, and torch's own warnings while reading a file are quieted.

torch's TorchScript -> ONNX exporter writes the whole TorchScript graph (89 lines, 16 kB
for a GRU with attention) to standard output from C++ when it fails, because torch 2.13
switches its ONNX log on for every export (it tests the function `_jit_is_onnx_log_enabled`
instead of calling it); its exception text is a 3 kB line of graph context. Neither helps
the person who ran `models import`: they get one line saying why, and this log keeps the
full text. The C++ side writes to file descriptors 1 and 2 directly, so Python's
`contextlib.redirect_stdout` cannot catch it: the descriptors themselves are pointed at the
log for the block (as `servebench.common.tf_runtime` does for TensorFlow's start-up lines;
`wurlitzer` does the same, but is no dependency of servebench for 30 lines).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_LIBC = ctypes.CDLL(None)


def log_beside(target: Path) -> Path:
    """Where the output of writing `target` is kept: `<target>.log` beside it."""
    return target.with_name(target.name + ".log")


def _flush() -> None:
    """Python's buffers and C's stdio buffers (where C++ `std::cout` writes), so nothing
    written before a switch of descriptors lands after it."""
    sys.stdout.flush()
    sys.stderr.flush()
    _LIBC.fflush(None)


@contextmanager
def output_to(log: Path) -> Iterator[None]:
    """Everything written to descriptors 1 and 2 during the block goes to `log` (appended),
    and so does the full text of an exception leaving it (which is raised on, unchanged).

    Process-wide for the block's duration: keep the block to the library call itself.
    """
    _flush()
    saved = (os.dup(1), os.dup(2))
    try:
        with open(log, "ab") as sink:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            try:
                yield
            except BaseException:
                _flush()
                sink.write(traceback.format_exc().encode(errors="replace"))
                raise
            finally:
                _flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])


@contextmanager
def quieted(logger_name: str, level: int) -> Iterator[None]:
    """Python warnings ignored, and the logger `logger_name` (with the ones below it) held
    to `level`, during the block; the logger's own level comes back after it. One place for
    what reading, exporting and converting a user's file each need while torch talks."""
    logger = logging.getLogger(logger_name)
    saved = logger.level
    logger.setLevel(level)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(saved)
