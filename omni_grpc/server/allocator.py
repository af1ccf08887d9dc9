"""Memory the server frees goes back to the system: large blocks get pages of their own.

glibc's malloc serves a block from its heap unless it is at least the mmap threshold, and it
raises that threshold to the size of each large block freed (up to 32 MiB). After one large
append, every later block of a few MiB (a message, its decoded copy, the engine's buffer) comes
from the heap, and when it is freed its pages stay with the process, mixed with live blocks:
measured with ``scripts/bench_memory.py``, eight sessions of one 10 MiB append each kept
18.6 MB of resident memory per session, of which 7.3 MB was the audio the engine holds.
A fixed threshold maps each large block on its own and unmaps it when freed (10.9 MB).

Smaller blocks (a socket's reads, a frame's pieces) still come from the heap; after a flood of
large frames the free pages among them stay with the process until :func:`give_back` asks glibc
to return them (``malloc_trim``), which a bridge calls when its frames in flight drain.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

logger = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's malloc.h
# Blocks from this size up are mapped on their own: far above the small objects of a session,
# below any append worth the name (a second of 24 kHz pcm16 is 48 KB; this is 22 s of it).
MMAP_THRESHOLD_BYTES = 1024 * 1024


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt, libc.malloc_trim  # noqa: B018  (glibc's, absent from other C libraries)
    except (OSError, AttributeError, TypeError):
        return None  # not glibc (musl, macOS): their allocators have no such calls
    return libc


def give_back() -> None:
    """Returns the heap's free pages to the system (glibc's ``malloc_trim``; elsewhere nothing)."""
    if (libc := _glibc()) is not None:
        libc.malloc_trim(0)


def return_large_blocks() -> bool:
    """Fixes glibc's mmap threshold for this process; False where the C library is another."""
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not done:
        logger.warning("mallopt refused the mmap threshold; freed audio may stay resident")
    return done


__all__ = ["MMAP_THRESHOLD_BYTES", "give_back", "return_large_blocks"]
