"""Reading files a user names: regular files only, of a bounded size, never blocking."""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

__all__ = ["MissingFileError", "open_regular_file", "read_regular_file"]


class MissingFileError(FileNotFoundError, ValueError):
    """A file a user named does not exist: a ``FileNotFoundError`` that is also the ``ValueError`` of a bad argument."""


def read_regular_file(path: str, where: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` of at most ``limit`` bytes; errors start with ``where``.

    FIFOs, devices, sockets and folders are refused after a non-blocking open (no
    wait for a writer, nothing read); every problem raises ``ValueError`` (a missing
    file :class:`MissingFileError`, also a ``FileNotFoundError``).
    """
    with open_regular_file(path, where, limit) as fh:
        try:
            raw = fh.read(limit + 1)
        except OSError as err:
            raise ValueError(f"{where} cannot be read: {err.strerror}") from None
    if len(raw) > limit:
        raise ValueError(f"{where} has more than the {limit} bytes read at most")
    return raw


def open_regular_file(path: str, where: str, limit: int) -> BinaryIO:
    """``path`` opened for reading once it is known to be a regular file of at most ``limit`` bytes."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)  # non-blocking: opening a FIFO does not wait for a writer
    except FileNotFoundError:
        raise MissingFileError(f"{where} does not exist") from None
    except OSError as err:
        raise ValueError(f"{where} cannot be opened: {err.strerror}") from None
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = f"{where} is not a regular file ({_kind(info.st_mode)})"
    elif info.st_size > limit:
        problem = f"{where} has {info.st_size} bytes, more than the {limit} read at most"
    if problem is not None:
        os.close(fd)
        raise ValueError(problem)
    return os.fdopen(fd, "rb")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"
