"""Server mode from Python: `deepwell serve` in a subprocess, deepwell.connect(), and
deepwell.open() of its datasets by name; rows read back equal the file's, writes land after
a flush, grants hold, and a missing server is one clear error."""
import os

import numpy as np
import pytest

import deepwell
from conftest import server_config, serving


@pytest.fixture
def server(tmp_path, deepwell_cli):
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, size=(512, 4096), dtype=np.uint8)
    data.tofile(tmp_path / "data.bin")
    (tmp_path / "secret.bin").write_bytes(b"\x5a" * 65536)
    for name in ("store.kv", "model.ckpt"):  # datasets for a key-value store and checkpoints, made by the admin
        with open(tmp_path / name, "wb") as f:
            f.truncate(8 << 20)
    sock = tmp_path / "dw.sock"
    uid = os.getuid()
    datasets = [dict(name="feats", file=tmp_path / "data.bin", writable=True),
                dict(name="secret", file=tmp_path / "secret.bin"),
                dict(name="store", file=tmp_path / "store.kv", writable=True),
                dict(name="model", file=tmp_path / "model.ckpt", writable=True)]
    grants = [dict(dataset=name, uid=uid, access="read-write") for name in ("feats", "store", "model")]
    # A uid that cannot reach pytest's private tmp_path: a root server refuses
    # to read for it what it could not read itself, unless the grant says so.
    grants.append(dict(dataset="secret", uid=uid + 4242, widen=True))
    (tmp_path / "ds.toml").write_text(server_config(sock, datasets, grants))

    with serving(deepwell_cli, tmp_path / "ds.toml", sock):
        yield str(sock), data, tmp_path
        deepwell.disconnect()


def test_rows_come_from_the_server_byte_for_byte(server):
    sock, data, tmp = server
    s = deepwell.connect(sock)
    a = deepwell.open("feats", dtype="uint8", shape=(-1, 4096), device="cpu", cache_size="256KiB", writable=True)
    assert a.backend == "server"
    assert f"deepwell serve at {sock}" in a.route, a.route  # which controller serves the misses, said
    assert a.shape == data.shape
    idx = np.random.default_rng(1).integers(0, 512, size=2000)
    assert np.array_equal(np.asarray(a[idx]), data[idx])
    new = np.full((3, 4096), 7, dtype=np.uint8)
    a[np.array([2, 300, 511])] = new
    a.flush()
    on_disk = np.fromfile(tmp / "data.bin", dtype=np.uint8).reshape(512, 4096)
    assert np.array_equal(on_disk[[2, 300, 511]], new)
    stats = s.stats()
    me = [c for c in stats["clients"] if c["bytes_read"] > 0]
    assert me and me[0]["bytes_written"] >= 3 * 4096
    a.close()


def test_a_dataset_without_a_grant_is_not_there(server):
    sock, _, tmp = server
    deepwell.connect(sock)
    with pytest.raises(deepwell.InvalidArgument, match="no dataset 'secret' is offered to uid"):
        deepwell.open("secret", dtype="uint8", device="cpu")
    with pytest.raises(deepwell.InvalidArgument, match="no dataset"):
        deepwell.open(str(tmp / "secret.bin"), dtype="uint8", device="cpu")


def test_no_server_is_one_clear_error(tmp_path):
    with pytest.raises(deepwell.IOFailure, match="no deepwell server at"):
        deepwell.connect(str(tmp_path / "nobody.sock"))
    assert deepwell._server.current() is None


def test_a_second_array_copies_pages_from_the_servers_host_tier(tmp_path, deepwell_cli):
    """The server's host tier as a client reads it: the first array's misses bring the pages into the
    tier through the server; a second array copies them from the dataset's arena, which the client maps
    read-only, with no command (docs/server.md, the host tier)."""
    data = np.random.default_rng(9).integers(0, 256, size=(256, 4096), dtype=np.uint8)
    data.tofile(tmp_path / "d.bin")
    sock = tmp_path / "tier.sock"
    (tmp_path / "tier.toml").write_text(server_config(sock, [dict(name="d", file=tmp_path / "d.bin")],
                                                      [dict(dataset="d", uid=os.getuid())], host_cache="2MiB"))

    with serving(deepwell_cli, tmp_path / "tier.toml", sock):
        deepwell.connect(str(sock))
        try:
            rows = np.arange(256)
            # direct="never": not the file's own mapping, so the tier is what serves the second array.
            first = deepwell.open("d", dtype="uint8", shape=(-1, 4096), device="cpu", cache_size="256KiB", direct="never")
            assert np.array_equal(np.asarray(first[rows]), data)
            assert first.stats()["tier_fills"] == 0
            first.close()
            second = deepwell.open("d", dtype="uint8", shape=(-1, 4096), device="cpu", cache_size="256KiB", direct="never")
            assert np.array_equal(np.asarray(second[rows]), data)
            st = second.stats()
            assert st["misses"] > 0
            assert st["tier_fills"] == st["misses"], st
            second.close()
        finally:
            deepwell.disconnect()


def test_a_kv_store_lives_in_a_granted_dataset_of_the_server(server):
    sock, _, tmp = server
    deepwell.connect(sock)
    keys = np.arange(0, 3000, 3, dtype=np.uint64)
    values = np.stack([keys * 7 + i for i in range(2)], axis=1).astype(np.uint64).view(np.uint8)
    with deepwell.kv.create("store", value_bytes=16, capacity=2000, log_rows=4096, device="cpu") as kv:
        kv.set(keys, values)
        kv.delete(keys[:100])
    # Another store handle (a new program would do the same) opens it by path and recovers.
    with deepwell.kv.open(str(tmp / "store.kv"), device="cpu") as kv:
        got, found = kv.get(keys)
        assert not found[:100].any() and found[100:].all()
        assert np.array_equal(np.asarray(got)[100:], values[100:])
    # A dataset granted to someone else is not there.
    with pytest.raises(deepwell.IOFailure, match="no dataset 'secret' is offered"):
        deepwell.kv.open("secret", device="cpu")
    deepwell.disconnect()
    # The bytes are in the file: the store opens in this process too.
    with deepwell.kv.open(str(tmp / "store.kv"), device="cpu") as kv:
        got, found = kv.get(keys[100:])
        assert found.all() and np.array_equal(np.asarray(got), values[100:])


def test_checkpoints_live_in_a_granted_dataset_of_the_server(server):
    sock, _, tmp = server
    import deepwell.checkpoint as ckpt
    deepwell.connect(sock)
    rng = np.random.default_rng(5)
    sd = {"w": rng.standard_normal((300, 200)).astype(np.float32), "step": np.asarray(3, dtype=np.int64)}
    assert ckpt.save(sd, "model")["generation"] == 1  # a blank dataset: a new store in place
    sd["w"][7] += 1
    info = ckpt.save(sd, "model")
    assert info["generation"] == 2
    got = ckpt.load("model", numpy=True)
    assert got["w"].tobytes() == sd["w"].tobytes() and int(got["step"]) == 3
    with pytest.raises(deepwell.IOFailure, match="no dataset 'secret' is offered"):
        ckpt.load("secret", numpy=True)
    deepwell.disconnect()
    # The same store, in this process, from the file.
    got = ckpt.load(str(tmp / "model.ckpt"), numpy=True)
    assert got["w"].tobytes() == sd["w"].tobytes()
