"""deepwell.kv, the persistent key-value store: CPU clients (device="cpu") run
everywhere, CI included; the GPU tests run where CUDA and torch are.
Every read is compared with a dict model."""
import os

import numpy as np
import pytest

import deepwell
import deepwell.kv as kv


def cpu_store(path, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("cache_size", "4MiB")
    kw.setdefault("cpu_threads", 2)
    return kv.create(path, **kw)


def value_rows(keys, value_bytes, salt):
    """A row of value_bytes for each key, different per key and salt."""
    rng = np.random.default_rng(int(salt))
    base = rng.integers(0, 256, size=(len(keys), value_bytes), dtype=np.uint8)
    base[:, :8] = (np.asarray(keys, np.uint64) * np.uint64(2654435761) + np.uint64(salt)).view(np.uint8).reshape(-1, 8)
    return base


def check_model(store, model, universe, value_bytes):
    keys = np.arange(universe, dtype=np.uint64)
    values, found = store.get(keys)
    assert values.shape == (universe, value_bytes) and values.dtype == np.uint8
    for k in range(universe):
        if k in model:
            assert found[k], k
            np.testing.assert_array_equal(values[k], model[k])
        else:
            assert not found[k], k
            assert not values[k].any()


def test_random_batches_match_a_dict(tmp_path):
    path = os.path.join(tmp_path, "t.kv")
    rng = np.random.default_rng(3)
    model = {}
    with cpu_store(path, value_bytes=24, capacity=5000, log_rows=4096) as s:
        assert s.value_bytes == 24 and not s.on_gpu
        for b in range(12):
            n = int(rng.integers(1, 600))
            keys = rng.integers(0, 2000, n).astype(np.uint64)
            if b % 3 == 2:
                found = s.delete(keys)
                seen = set()
                for i in range(n - 1, -1, -1):  # the last occurrence reports
                    k = int(keys[i])
                    if k in seen:
                        continue
                    seen.add(k)
                    assert found[i] == (k in model), (b, i, k)
                for k in keys:
                    model.pop(int(k), None)
            else:
                values = value_rows(keys, 24, b)
                r = s.set(keys, values)
                assert r["full"] == 0 and r["bad_key"] == 0
                assert r["inserted"] + r["updated"] + r["superseded"] == n
                for i, k in enumerate(keys):
                    model[int(k)] = values[i]
            check_model(s, model, 2000, 24)
    # close() checkpointed: nothing to replay.
    with kv.open(path, device="cpu", value_bytes=24) as s:
        assert s.info()["recovered_batches"] == 0
        check_model(s, model, 2000, 24)


def test_a_killed_process_loses_no_batch(tmp_path):
    """A process that dies (os._exit: no close, no checkpoint) after its set()
    calls returned: the next open replays them from the log."""
    path = os.path.join(tmp_path, "crash.kv")
    script = f"""
import os, numpy as np, deepwell.kv as kv
s = kv.create({path!r}, value_bytes=16, capacity=4000, device="cpu", cache_size="4MiB", cpu_threads=2)
for b in range(4):
    keys = np.arange(b * 100, b * 100 + 300, dtype=np.uint64)
    s.set(keys, np.stack([keys * 3 + b, keys], axis=1))
s.delete(np.arange(0, 50, dtype=np.uint64))
print("done", flush=True)
os._exit(0)
"""
    import subprocess
    import sys
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(kv.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    model = {}
    for b in range(4):
        for k in range(b * 100, b * 100 + 300):
            model[k] = np.array([k * 3 + b, k], np.uint64).view(np.uint8)
    for k in range(50):
        model.pop(k, None)
    with kv.open(path, device="cpu") as s:
        assert s.info()["recovered_batches"] == 5
        check_model(s, model, 700, 16)


def test_typed_values_chunks_and_mapping_methods(tmp_path):
    path = os.path.join(tmp_path, "f.kv")
    with cpu_store(path, value_bytes=16, capacity=10000, max_batch=1000) as s:
        assert s.max_batch == 1000
        keys = np.arange(2500, dtype=np.int64) * 3          # 3 batches of at most 1000
        values = np.stack([keys.astype(np.float64), -keys.astype(np.float64)], axis=1)  # (n, 2) float64: 16 bytes
        # One call is one atomic batch: larger than max_batch only when asked.
        with pytest.raises(deepwell.InvalidArgument, match="split=True"):
            s.set(keys, values)
        with pytest.raises(deepwell.InvalidArgument, match="split=True"):
            s.delete(keys)
        assert 3 not in s
        r = s.set(keys, values, split=True)
        assert r["inserted"] == 2500 and r["ops"] == 2500
        out = np.empty((2500, 2), np.float64)
        got, found = s.get(keys, out=out)
        assert got is out and found.all()
        np.testing.assert_array_equal(out, values)
        assert 3 in s and 4 not in s
        np.testing.assert_array_equal(s[6].view(np.float64), [6.0, -6.0])
        s[4] = np.array([1.5, 2.5])
        np.testing.assert_array_equal(s[4].view(np.float64), [1.5, 2.5])
        del s[4]
        assert 4 not in s
        with pytest.raises(KeyError):
            del s[4]
        with pytest.raises(KeyError):
            s[5]
        _, st = s.set([1, 2], np.zeros((2, 16), np.uint8), return_status=True)
        assert list(st) == [kv.OK, kv.OK]
        s.checkpoint()
        assert s.info()["checkpoints"] >= 1


def test_bad_input_is_refused(tmp_path):
    path = os.path.join(tmp_path, "b.kv")
    with cpu_store(path, value_bytes=8, capacity=100) as s:
        with pytest.raises(deepwell.InvalidArgument, match="values hold 24 bytes"):
            s.set([1, 2], np.zeros(3, np.uint64))
        with pytest.raises(deepwell.InvalidArgument, match="negative"):
            s.set(np.array([-1]), np.zeros(1, np.uint64))
        with pytest.raises(deepwell.InvalidArgument, match="integers"):
            s.get(np.array([1.5]))
        with pytest.raises(deepwell.InvalidArgument, match="2\\*\\*64 - 3"):
            s.get(np.array([2**64 - 1], np.uint64))
        r, st = s.set(np.array([2**64 - 2, 5], np.uint64), np.zeros(2, np.uint64), return_status=True)
        assert r["bad_key"] == 1 and list(st) == [kv.BAD_KEY, kv.OK]
    with pytest.raises(deepwell.InvalidArgument, match="value_bytes"):
        kv.create(path, value_bytes=0)
    with pytest.raises(deepwell.InvalidArgument, match="8 to 128"):
        kv.create(path, value_bytes=12, device="cpu")
    # Negative sizes are refused by name, not wrapped to 2^32 - 8 or 2^64 - 1.
    with pytest.raises(deepwell.InvalidArgument, match="value_bytes cannot be negative: -8"):
        kv.create(os.path.join(tmp_path, "n.kv"), value_bytes=-8, device="cpu")
    with pytest.raises(deepwell.InvalidArgument, match="capacity cannot be negative: -1"):
        kv.create(os.path.join(tmp_path, "n.kv"), value_bytes=8, capacity=-1, device="cpu")
    # Another shape: the message names the file.
    with pytest.raises(deepwell.InvalidArgument, match=f"{path}.*values are 8 bytes; opened expecting 32"):
        kv.open(path, device="cpu", value_bytes=32)
    # A corrupted header.
    with open(path, "r+b") as f:
        f.seek(20)
        b = f.read(1)
        f.seek(20)
        f.write(bytes([b[0] ^ 0x10]))
    with pytest.raises(deepwell.IOFailure, match=f"{path}.*corrupted kv header"):
        kv.open(path, device="cpu")
    # Not a store; missing.
    other = os.path.join(tmp_path, "zeros.bin")
    with open(other, "wb") as f:
        f.write(bytes(1 << 17))
    with pytest.raises(deepwell.IOFailure, match="not a deepwell kv store"):
        kv.open(other, device="cpu")
    with pytest.raises(FileNotFoundError, match="missing.kv"):  # as deepwell.open
        kv.open(os.path.join(tmp_path, "missing.kv"), device="cpu")


def test_bytes_needed_and_info(tmp_path):
    n = kv.bytes_needed(32, 100000)
    path = os.path.join(tmp_path, "i.kv")
    with cpu_store(path, value_bytes=32, capacity=100000) as s:
        i = s.info()
        assert i["file_bytes"] == n == os.path.getsize(path)
        assert i["key_bytes"] == 8 and i["value_bytes"] == 32 and i["slots"] >= 100000
        assert "closed" not in repr(s)
    assert "closed" in repr(s)
    with pytest.raises(deepwell.InvalidArgument, match="closed"):
        s.get([1])


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_damaged_bytes_are_an_error_never_wrong_values(tmp_path, device):
    """A store closed normally (it checkpoints), then one byte of its table
    flipped, or a block zeroed: reading the damaged block is an IOFailure
    naming the file; every other key reads back right."""
    if device == "cuda" and not deepwell.cuda_available():
        pytest.skip("no GPU")
    path = os.path.join(tmp_path, "d.kv")
    keys = np.arange(3000, dtype=np.uint64) * 7 + 1
    values = (keys[:, None] * np.arange(1, 5, dtype=np.uint64)[None, :]).astype(np.uint64)  # 32 bytes a key
    with cpu_store(path, value_bytes=32, capacity=4000, bucket_bytes=1024) as s:
        s.set(keys, values)
        assert s.info()["table_checksums"] == 1
    table = 64 << 10  # the table starts after the 64 KiB header (docs/kv.md)
    for damage in ("flip", "zero"):
        img = open(path, "rb").read()
        bad = bytearray(img)
        at = table + 5 * 1024 + 100
        if damage == "flip":
            bad[at] ^= 0x04
        else:
            bad[table + 5 * 1024: table + 6 * 1024] = bytes(1024)
        other = os.path.join(tmp_path, f"{damage}.kv")
        open(other, "wb").write(bytes(bad))
        errors = 0
        with kv.open(other, device=device, max_batch=1, cache_size="8MiB") as s:
            for k, v in zip(keys, values):
                try:
                    got, found = s.get(np.array([k], np.uint64))
                except deepwell.IOFailure as e:
                    assert other in str(e) and "Guard Check" in str(e)
                    errors += 1
                    continue
                assert bool(found[0]) and (got.view(np.uint64)[0] == v).all(), f"key {k} read back wrong"
        assert errors > 0, f"the {damage}ed block was never reported"


def _gpu_ready():
    try:
        import torch as t  # noqa: F401
    except ImportError:
        return False
    return deepwell.cuda_available() and t.cuda.is_available()


@pytest.mark.skipif(not _gpu_ready(), reason="needs CUDA and torch")
def test_gpu_store_with_cuda_tensors(tmp_path):
    import torch as t
    path = os.path.join(tmp_path, "g.kv")
    with kv.create(path, value_bytes=32, capacity=200000, device="cuda", cache_size="64MiB") as s:
        assert s.on_gpu
        keys = t.randperm(300000, device="cuda")[:100000]
        values = t.randint(0, 255, (100000, 32), dtype=t.uint8, device="cuda")
        r = s.set(keys, values, split=True)
        assert r["inserted"] == 100000
        got, found = s.get(keys)
        assert got.is_cuda and bool(found.all())
        assert t.equal(got, values)
        gone = s.delete(keys[:1000])
        assert bool(gone.all())
        _, found = s.get(keys[:2000])
        assert not bool(found[:1000].any()) and bool(found[1000:].all())
        # host keys into the same store
        hv, hf = s.get(keys[1000:1010].cpu().numpy())
        assert hf.all()
        np.testing.assert_array_equal(hv, values[1000:1010].cpu().numpy())
    with kv.open(path, device="cuda") as s:
        got, found = s.get(keys[1000:])
        assert bool(found.all()) and t.equal(got, values[1000:])
