"""What `panda` shows on stderr: its own lines, and nothing of the libraries it runs.

Spark's JVM, Dagster, py4j and Python's warnings machinery all write to stderr, each its
own way. By default a command runs inside `quiet_output()`:

- file descriptor 2 points at /dev/null, so the processes started meanwhile (Spark's
  launcher and JVM, which print before any logging is configured) write nothing there;
  they keep that stderr for as long as they live;
- `sys.stderr` passes on only what the product's own code writes: a write whose first
  caller outside the standard library is a `p2panda_assets` module (so `print(...,
  file=sys.stderr)` in a command goes through, a library's log handler does not);
- warnings are ignored, and the loggers of Dagster, py4j and PySpark end at a null handler.

`verbose_output()` (`panda --verbose`) leaves stderr alone and has Spark's driver log its
warnings too (`P2PANDA_SPARK_LOG_LEVEL`, read by the package's `log4j2.properties`).
"""

from __future__ import annotations

import io
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from types import FrameType
from typing import TextIO

SPARK_LOG_LEVEL_ENV = "P2PANDA_SPARK_LOG_LEVEL"
VERBOSE_SPARK_LOG_LEVEL = "warn"  # Spark's own default
LIBRARY_LOGGERS = ("dagster", "py4j", "pyspark")
PRODUCT_PACKAGE = "p2panda_assets"


@contextmanager
def verbose_output() -> Iterator[None]:
    """Everything shown; Spark's driver logs warnings (unless the level is set already)."""
    before = os.environ.get(SPARK_LOG_LEVEL_ENV)
    os.environ.setdefault(SPARK_LOG_LEVEL_ENV, VERBOSE_SPARK_LOG_LEVEL)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SPARK_LOG_LEVEL_ENV, None)


@contextmanager
def quiet_output() -> Iterator[None]:
    """Only the product's own lines on stderr, while the block runs."""
    with ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(_library_loggers_silenced())
        product = stack.enter_context(_descriptor_2_to_devnull())
        stack.enter_context(_stderr_for_product_only(product))
        yield


class ProductOnly(io.TextIOBase):
    """A text stream that forwards what the product writes, and drops the rest."""

    def __init__(self, target: TextIO) -> None:
        self.target = target

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.target, "errors", None)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if written_by_product(sys._getframe(1)):
            return self.target.write(text)
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()


def written_by_product(frame: FrameType | None) -> bool:
    """Is the first caller outside the standard library (from `frame` up) the product's?"""
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        top = module.partition(".")[0]
        if top not in sys.stdlib_module_names:
            return top == PRODUCT_PACKAGE or module == "__main__"
        frame = frame.f_back
    return False


@contextmanager
def _library_loggers_silenced() -> Iterator[None]:
    """Records of these loggers stop at a null handler: not at the root's handlers, nor
    at Python's last-resort handler (which prints warnings on stderr). Dagster's capture
    of its own loggers into the event log hangs below them and is not affected."""
    changed = []
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        handler = logging.NullHandler()
        changed.append((logger, handler, logger.propagate))
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, handler, propagate in changed:
            logger.removeHandler(handler)
            logger.propagate = propagate


@contextmanager
def _descriptor_2_to_devnull() -> Iterator[TextIO]:
    """Point file descriptor 2 at /dev/null; yield the stream the product's lines go to
    meanwhile (`sys.stderr`, or a copy of the old descriptor 2 if `sys.stderr` wrote
    there)."""
    stream = sys.stderr
    _flush(stream)
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 at all: nothing to silence
        yield stream
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        if not _writes_to_descriptor_2(stream):
            yield stream
            return
        copy = open(  # noqa: SIM115  # closed below; the descriptor stays open
            saved,
            "w",
            encoding=getattr(stream, "encoding", None) or "utf-8",
            errors="backslashreplace",
            buffering=1,
            closefd=False,
        )
        try:
            yield copy
        finally:
            copy.close()
    finally:
        _flush(sys.stderr)
        os.dup2(saved, 2)
        os.close(saved)


@contextmanager
def _stderr_for_product_only(product: TextIO) -> Iterator[None]:
    before = sys.stderr
    sys.stderr = ProductOnly(product)
    try:
        yield
    finally:
        _flush(sys.stderr)
        sys.stderr = before


def _writes_to_descriptor_2(stream: TextIO) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return False


def _flush(stream: TextIO | io.TextIOBase) -> None:
    with suppress(AttributeError, OSError, ValueError):
        stream.flush()
