import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def pattern(rows: int, row_bytes: int, seed: int = 7) -> np.ndarray:
    """Deterministic bytes, different in every row (row r starts with r as int64 where it fits)."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(rows, row_bytes), dtype=np.uint8)
    if row_bytes >= 8:
        data[:, :8] = np.arange(rows, dtype=np.int64).view(np.uint8).reshape(rows, 8)
    return data


@pytest.fixture
def make_file(tmp_path):
    def make(rows: int, row_bytes: int, seed: int = 7, name: str = "data.bin"):
        data = pattern(rows, row_bytes, seed)
        path = os.path.join(tmp_path, name)
        data.tofile(path)
        return path, data
    return make


@pytest.fixture
def deepwell_cli() -> str:
    """The `deepwell` command: DEEPWELL_CLI, else the checkout's build, else PATH."""
    env = os.environ.get("DEEPWELL_CLI")
    if env:
        return env
    for p in (REPO / "build" / "bin" / "deepwell", shutil.which("deepwell")):
        if p and os.path.exists(p):
            return str(p)
    pytest.skip("no `deepwell` command built (scripts/setup builds build/bin/deepwell; or set DEEPWELL_CLI)")


def server_config(sock, datasets, grants=(), **server) -> str:
    """A server's TOML: [server] with its socket and any other keys, then each dataset and grant
    (dicts of keys: strings quoted, booleans and numbers as TOML writes them)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v) if isinstance(v, (int, float)) else f'"{v}"'
    lines = ["[server]", f'socket = "{sock}"'] + [f"{k} = {value(v)}" for k, v in server.items()]
    for table, items in (("dataset", datasets), ("grant", grants)):
        for item in items:
            lines += [f"[[{table}]]"] + [f"{k} = {value(v)}" for k, v in item.items()]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def serving(cli: str, config: pathlib.Path, sock: pathlib.Path, **popen):
    """`deepwell serve --config CONFIG` until the block ends (popen: cwd, env, ...); yields once its
    socket is there, and checks that it stops cleanly (exit 0, socket gone)."""
    proc = subprocess.Popen([cli, "serve", "--config", str(config)], stderr=subprocess.PIPE, **popen)
    try:
        for _ in range(250):
            if sock.exists():
                break
            time.sleep(0.02)
        assert sock.exists(), "the server did not start"
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read()
    assert not sock.exists(), "the server removes its socket when it stops"
