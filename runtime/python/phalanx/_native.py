"""Loads libphalanx_c.so and declares the C ABI (runtime/client/phalanx_c.h) for ctypes.

Internal: use :mod:`phalanx` instead.
"""

import ctypes
import ctypes.util
import os
import threading

from .errors import LibraryNotFound

LIBRARY_NAME = "libphalanx_c.so"
# The wheel puts the library and its bundled dependencies (gRPC, protobuf, abseil, ... renamed,
# RUNPATH $ORIGIN) in this directory of the package.
BUNDLED_DIR = "_libs"

PEER_CHANGE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64,
                                  ctypes.c_int, ctypes.c_char_p)
PREEMPTION_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64,
                                 ctypes.c_char_p)
# Optional extension (phalanx_set_preemption_callback2): also passes the tasks the round names.
PREEMPTION2_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64,
                                  ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_size_t)

# phalanx_set_reconnect_callback: (user, coordinator_restarted).
RECONNECT_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)


class KvEntry(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_void_p),
                ("value_len", ctypes.c_size_t)]


_lock = threading.Lock()
_lib = None
_lib_path = None


def candidate_paths():
    """Where :func:`load` looks, in order: $PHALANX_LIBRARY, next to the package, the loader path."""
    paths = []
    env = os.environ.get("PHALANX_LIBRARY")
    if env:
        paths.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    paths.append(os.path.join(here, BUNDLED_DIR, LIBRARY_NAME))  # the wheel's (scripts/build_wheel.py)
    paths.append(os.path.join(here, LIBRARY_NAME))
    paths.append(os.path.join(os.path.dirname(here), LIBRARY_NAME))
    paths.append(LIBRARY_NAME)  # dlopen's own search: LD_LIBRARY_PATH, ld.so.cache, ...
    found = ctypes.util.find_library("phalanx_c")
    if found:
        paths.append(found)
    return paths


def _load_mode(path):
    """RTLD_LOCAL, plus RTLD_DEEPBIND for the wheel's bundled library: its gRPC, protobuf and
    abseil then bind to their own bundled copies even where torch or jax already loaded other
    versions of them with global symbols. (Not for a build-tree library: a sanitizer runtime
    must interpose on it.)"""
    mode = os.RTLD_LOCAL
    if os.path.basename(os.path.dirname(path)) == BUNDLED_DIR and hasattr(os, "RTLD_DEEPBIND"):
        mode |= os.RTLD_DEEPBIND
    return mode


def _declare(lib):
    c_int, c_int64, c_uint64, c_size_t = ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t
    c_char_p, c_void_p = ctypes.c_char_p, ctypes.c_void_p
    P = ctypes.POINTER
    client_p = c_void_p

    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    fn("phalanx_last_error", c_char_p)
    fn("phalanx_last_error_details", c_char_p)
    fn("phalanx_free", None, c_void_p)
    fn("phalanx_client_create_from_env", c_int, P(client_p))
    fn("phalanx_client_create", c_int, c_char_p, c_char_p, c_int, c_int, c_uint64, c_char_p,
       P(client_p))
    fn("phalanx_client_destroy", None, client_p)
    fn("phalanx_set_peer_change_callback", None, client_p, PEER_CHANGE_FN, c_void_p)
    fn("phalanx_set_preemption_callback", None, client_p, PREEMPTION_FN, c_void_p)
    if hasattr(lib, "phalanx_set_preemption_callback2"):
        fn("phalanx_set_preemption_callback2", None, client_p, PREEMPTION2_FN, c_void_p)
    if hasattr(lib, "phalanx_set_reconnect_callback"):
        fn("phalanx_set_reconnect_callback", None, client_p, RECONNECT_FN, c_void_p)
        fn("phalanx_wait_until_connected", c_int, client_p, c_int64)
        fn("phalanx_connected", c_int, client_p)
    fn("phalanx_task_id", c_int, client_p)
    fn("phalanx_num_tasks", c_int, client_p)
    fn("phalanx_incarnation", c_uint64, client_p)
    fn("phalanx_connect", c_int, client_p, c_int64)
    fn("phalanx_barrier", c_int, client_p, c_char_p, c_int64, P(c_int), c_size_t)
    fn("phalanx_cancel_barrier", c_int, client_p, c_char_p)
    fn("phalanx_kv_set", c_int, client_p, c_char_p, c_void_p, c_size_t, c_int)
    if hasattr(lib, "phalanx_kv_set_nowait"):
        fn("phalanx_kv_set_nowait", c_int, client_p, c_char_p, c_void_p, c_size_t, c_int)
        fn("phalanx_kv_wait_sets", c_int, client_p, c_int64)
    fn("phalanx_kv_get", c_int, client_p, c_char_p, c_int64, P(c_void_p), P(c_size_t))
    fn("phalanx_kv_try_get", c_int, client_p, c_char_p, P(c_void_p), P(c_size_t))
    fn("phalanx_kv_dir", c_int, client_p, c_char_p, P(P(KvEntry)), P(c_size_t))
    fn("phalanx_kv_entries_free", None, P(KvEntry), c_size_t)
    fn("phalanx_kv_delete", c_int, client_p, c_char_p, P(c_int))
    fn("phalanx_kv_add", c_int, client_p, c_char_p, c_int64, P(c_int64))
    fn("phalanx_kv_compare_set", c_int, client_p, c_char_p, c_void_p, c_size_t, c_void_p,
       c_size_t, P(c_int), P(c_int), P(c_void_p), P(c_size_t))
    fn("phalanx_report_error", c_int, client_p, c_char_p)
    if hasattr(lib, "phalanx_report_rolled_back"):
        fn("phalanx_report_rolled_back", c_int, client_p, c_char_p, ctypes.c_double)
    if hasattr(lib, "phalanx_report_stepping"):
        fn("phalanx_report_stepping", c_int, client_p)
    fn("phalanx_alive_tasks", c_int, client_p, P(c_int), c_size_t, c_int64, P(c_int),
       P(c_uint64), c_size_t, P(c_size_t))
    fn("phalanx_notify_preemption", c_int, client_p, c_char_p, c_int64, P(c_int), c_size_t,
       P(c_uint64))
    fn("phalanx_reached_sync_point", c_int, client_p, c_int64, P(c_int))
    fn("phalanx_shutdown", c_int, client_p, c_int64)
    if hasattr(lib, "phalanx_leave"):
        fn("phalanx_leave", c_int, client_p, c_char_p, c_int64)
    if hasattr(lib, "phalanx_await_assignment"):
        fn("phalanx_await_assignment", c_int, c_int64, P(c_int), P(c_uint64), c_void_p,
           c_size_t)
    return lib


def load():
    """The loaded library (loaded once per process). Raises :class:`LibraryNotFound`."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidate_paths():
            if os.sep in path and not os.path.exists(path):
                tried.append("%s (no such file)" % path)
                continue
            try:
                lib = ctypes.CDLL(path, mode=_load_mode(path))  # CDLL: calls release the GIL
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                if path == os.environ.get("PHALANX_LIBRARY"):
                    break  # an explicit choice that fails should not silently fall back
                continue
            _lib = _declare(lib)
            _lib_path = path
            return _lib
        raise LibraryNotFound(
            "cannot load %s; set PHALANX_LIBRARY to its path (it is built at "
            "build/runtime/client/libphalanx_c.so). Tried: %s" % (LIBRARY_NAME, "; ".join(tried)))


def library_path():
    """The path the library was loaded from (None before :func:`load`)."""
    return _lib_path
