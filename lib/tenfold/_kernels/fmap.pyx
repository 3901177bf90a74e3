# cython: language_level=3
"""Open a file, read its two ends, and map it read-only, in as few system calls as the
operating system needs (twin: ``_ref_fmap.py``).

Knows nothing of any format: a reader's commonest open (a regular file, a magic at its head,
its index near its end) is ``open_ends`` (open, fstat, two preads: one Python call instead of
five, and the file opened once whatever its magic says) and ``map_fd`` (one mmap: Python's ``mmap.mmap`` adds an fstat and a dup, and a close of
that dup later). The system calls run without the GIL; an interrupted call is retried after
Python's signal handlers have run, as the ``os`` functions do (PEP 475).
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport EINTR, errno
from posix.fcntl cimport O_CLOEXEC, O_NONBLOCK, O_RDONLY
from posix.fcntl cimport open as c_open
from posix.mman cimport MAP_FAILED, MAP_SHARED, PROT_READ, mmap, munmap
from posix.stat cimport S_ISREG, fstat, struct_stat
from posix.types cimport off_t
from posix.unistd cimport close, pread

import os

cdef extern from "Python.h":
    object PyUnicode_EncodeFSDefault(object)

# what open_ends got to before it stopped
cdef enum Step:
    DONE = 0
    FAILED_OPEN = 1
    FAILED_OTHER = 2
    NOT_REGULAR = 3


cdef Py_ssize_t _pread_full(int fd, char* buf, Py_ssize_t n, off_t at) noexcept nogil:
    """Read ``n`` bytes at ``at`` (fewer only at end of file); -1 with ``errno`` on an error
    (``EINTR`` is returned to the caller, which checks signals and retries)."""
    cdef Py_ssize_t done = 0, got
    while done < n:
        got = pread(fd, buf + done, n - done, at + done)
        if got < 0:
            return -1
        if got == 0:
            break
        done += got
    return done


cdef Step _open_stat(const char* cpath, int* fd_out, off_t* size_out) noexcept nogil:
    """Open and fstat; ``fd_out`` is set once opened."""
    cdef int fd
    cdef struct_stat st
    fd = c_open(cpath, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
    if fd < 0:
        return FAILED_OPEN
    fd_out[0] = fd
    if fstat(fd, &st) != 0:
        return FAILED_OTHER
    size_out[0] = st.st_size
    if not S_ISREG(st.st_mode):
        return NOT_REGULAR
    return DONE


cdef bytes _read_at(int fd, Py_ssize_t n, off_t at, object fspath):
    """``n`` bytes at ``at`` (fewer at end of file); closes ``fd`` before raising."""
    cdef bytes out
    cdef Py_ssize_t got
    cdef int err
    try:
        out = PyBytes_FromStringAndSize(NULL, n)
    except BaseException:
        close(fd)
        raise
    cdef char* buf = PyBytes_AS_STRING(out)
    while True:
        with nogil:
            got = _pread_full(fd, buf, n, at)
            err = errno
        if got >= 0:
            break
        if err == EINTR:
            try:
                PyErr_CheckSignals()  # raises what a handler raised
            except BaseException:
                close(fd)
                raise
            continue
        close(fd)
        raise OSError(err, os.strerror(err), fspath)
    return out if got == n else out[:got]


def open_ends(path, Py_ssize_t head, Py_ssize_t tail):
    """Open ``path`` read-only and read its ends: ``(fd, size, first, last)`` when it is a
    regular file, where ``first`` is its first ``min(size, head)`` bytes and ``last`` its last
    ``min(size, tail)`` (fewer only if the file shrank meanwhile), and ``fd`` is the caller's
    to close; ``None`` (nothing left open) when it is not a regular file.

    The descriptor is opened with ``O_CLOEXEC | O_NONBLOCK`` (a FIFO is not waited for);
    ``OSError`` (naming ``path``) when a system call fails, nothing left open.
    """
    if head < 0 or tail < 0:
        raise ValueError(f"head and tail must be >= 0, got {head} and {tail}")
    fspath = os.fspath(path)
    encoded = PyUnicode_EncodeFSDefault(fspath) if isinstance(fspath, str) else fspath
    cdef bytes cpath = <bytes?>encoded
    if b"\0" in cpath:
        raise ValueError("embedded null byte")
    cdef const char* cp = PyBytes_AS_STRING(cpath)
    cdef int fd = -1, err = 0
    cdef off_t size = 0
    cdef Py_ssize_t n
    cdef Step step
    while True:
        with nogil:
            step = _open_stat(cp, &fd, &size)
            err = errno
            if step != DONE and fd >= 0:
                close(fd)
        if step == FAILED_OPEN or step == FAILED_OTHER:
            fd = -1
            if err == EINTR:
                PyErr_CheckSignals()  # raises what a handler raised
                continue
            raise OSError(err, os.strerror(err), fspath)
        break
    if step != DONE:
        return None
    first = _read_at(fd, head if size >= head else <Py_ssize_t>size, 0, fspath)
    n = tail if size >= tail else <Py_ssize_t>size
    last = _read_at(fd, n, size - n, fspath)
    return fd, size, first, last


#: Maps of at least this many bytes are unmapped with the GIL released.
cdef size_t _NOGIL_UNMAP = 1 << 22


cdef class Map:
    """A whole file mapped read-only and shared; exports its bytes (buffer protocol, never
    writable) and is unmapped when the last object using them is gone. It has no close: a
    view of it can never outlive the mapping."""

    cdef void* addr
    cdef readonly Py_ssize_t size

    def __cinit__(self):
        self.addr = NULL
        self.size = 0

    def __dealloc__(self):
        cdef void* addr = self.addr
        cdef size_t size = self.size
        if addr == NULL:
            return
        self.addr = NULL
        if size < _NOGIL_UNMAP:
            munmap(addr, size)
        else:  # tearing down a large map's page tables takes a while: other threads run
            with nogil:
                munmap(addr, size)

    def __getbuffer__(self, Py_buffer* buf, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("a tenfold Map is read-only")
        PyBuffer_FillInfo(buf, self, self.addr, self.size, 1, flags)

    def __len__(self):
        return self.size


def map_fd(int fd, Py_ssize_t size):
    """The first ``size`` (> 0) bytes of the file open on ``fd``, mapped read-only and shared
    (``OSError`` when ``mmap`` fails). The map does not need ``fd`` to stay open. ``size`` is
    the file's size from ``fstat`` (not checked again here: a page past the end of the file
    faults when touched, as with any map of a file that another process truncates)."""
    if size <= 0:
        raise ValueError(f"size must be > 0, got {size}")
    cdef Map m = Map.__new__(Map)
    cdef void* addr
    cdef int err
    with nogil:
        addr = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0)
        err = errno
    if addr == MAP_FAILED:
        raise OSError(err, os.strerror(err))
    m.addr = addr
    m.size = size
    return m
