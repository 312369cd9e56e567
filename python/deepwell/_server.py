"""Server mode for the Python package: ``deepwell.connect(socket)`` makes
``deepwell.open(name, ...)`` open datasets that a ``deepwell serve`` process
offers (by name, or by their file's path), served under this process's
grants. Without connect(), ``DEEPWELL_SERVER`` in the environment does the
same; with neither, datasets are files this process opens itself.
See docs/server.md.
"""
from __future__ import annotations

import ctypes
import json
import os
from typing import Optional

from . import _lib
from ._lib import check, lib

_lib.bind(lib, {
    "dw_set_server": [_lib.c_str],
    "dw_server_stats": [_lib.c_str, _lib.u64, _lib.ptr(_lib.u64)],
}, "server mode (src/capi/c_api.cpp)")

_explicit: Optional[str] = None
_connected = False


def current() -> Optional[str]:
    """The socket of the server in effect: connect()'s, else DEEPWELL_SERVER's, else None."""
    if _connected:
        return _explicit
    return os.environ.get("DEEPWELL_SERVER") or None


class Server:
    """A connection to a deepwell server (what deepwell.connect returns)."""

    def __init__(self, socket: str):
        self.socket = socket

    def stats(self) -> dict:
        """The server's statistics: its datasets, clients and counters (as ``deepwell stat --json``)."""
        need = ctypes.c_uint64(0)
        check(lib.dw_server_stats(None, 0, ctypes.byref(need)))
        buf = ctypes.create_string_buffer(int(need.value) + 4096)
        check(lib.dw_server_stats(buf, len(buf), ctypes.byref(need)))
        return json.loads(buf.value.decode())

    def close(self) -> None:
        """Back to embedded mode (arrays already open stay served by the server)."""
        disconnect()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"deepwell.Server({self.socket!r})"


def connect(socket: Optional[str] = None) -> Server:
    """Serve this process's deepwell.open(...) calls from the server at ``socket`` (default:
    DEEPWELL_SERVER, else $XDG_RUNTIME_DIR/deepwell.sock, else /tmp/deepwell-UID/deepwell.sock).
    Checks that a server answers there; raises deepwell.IOFailure if none does."""
    global _explicit, _connected
    if socket is None:
        socket = os.environ.get("DEEPWELL_SERVER") or default_socket()
    socket = os.fspath(socket)
    check(lib.dw_set_server(socket.encode()))
    _explicit, _connected = socket, True
    try:
        Server(socket).stats()  # something answers there
    except Exception:
        disconnect()
        raise
    return Server(socket)


def disconnect() -> None:
    """Forget connect()'s server (DEEPWELL_SERVER applies again, if set)."""
    global _explicit, _connected
    check(lib.dw_set_server(None))
    _explicit, _connected = None, False


def default_socket() -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return f"{runtime}/deepwell.sock" if runtime else f"/tmp/deepwell-{os.getuid()}/deepwell.sock"
