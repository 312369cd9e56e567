"""deepwell.checkpoint: state dicts saved and loaded through the C ABI. NumPy
arrays and CPU torch tensors run everywhere (CI included; torch tests skip
where torch is missing); CUDA tensors where there is a GPU."""
import os

import numpy as np
import pytest

import deepwell
import deepwell.checkpoint as ckpt


def state(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "layer.weight": rng.standard_normal((64, 300)).astype(np.float32),   # 75 KiB: several 64 KiB units
        "layer.bias": rng.standard_normal(300).astype(np.float32),
        "step": np.asarray(7, dtype=np.int64),                                # 0-d
        "mask": rng.integers(0, 2, (5, 3)).astype(np.bool_),
        "empty": np.zeros((0, 4), np.float16),
        "ids": rng.integers(-2**40, 2**40, 1000, dtype=np.int64),
    }


def same(a, b):
    assert set(a) == set(b)
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert x.tobytes() == y.tobytes(), k


def test_numpy_round_trip(tmp_path):
    path = tmp_path / "a.ckpt"
    sd = state()
    info = ckpt.save(sd, path)
    assert info["generation"] == 1 and not info["incremental"]
    assert info["data_bytes"] == sum(v.nbytes for v in sd.values())
    got = ckpt.load(path, numpy=True)
    same(sd, got)
    assert ckpt.generation(path) == 1
    assert ckpt.verify(path) == 1
    assert {m[0]: (m[1], m[2]) for m in ckpt.manifest(path)}["layer.weight"] == ("float32", (64, 300))


def test_load_into_overwrites_in_place(tmp_path):
    path = tmp_path / "b.ckpt"
    sd = state(1)
    ckpt.save(sd, path)
    into = {k: np.zeros_like(v) for k, v in sd.items()}
    ids = {k: id(v) for k, v in into.items()}
    out = ckpt.load(path, into=into)
    assert out is into and {k: id(v) for k, v in out.items()} == ids
    same(sd, into)
    # a non-contiguous target is filled through a copy
    into2 = {k: np.zeros_like(v) for k, v in sd.items()}
    into2["layer.weight"] = np.zeros((300, 64), np.float32).T
    ckpt.load(path, into=into2)
    same(sd, into2)


def test_generations_and_incremental_saves(tmp_path):
    path = tmp_path / "c.ckpt"
    sd = state(2)
    ckpt.save(sd, path)
    ckpt.save(sd, path)  # generation 2, the other slot: written whole (its contents were unknown)
    sd["layer.bias"][3] += 1  # one 64 KiB unit changes
    info = ckpt.save(sd, path)
    assert info["generation"] == 3
    assert info["incremental"]
    assert info["units_written"] == 1, info
    assert info["bytes_written"] < 200 * 1024
    same(sd, ckpt.load(path, numpy=True))
    with ckpt.CheckpointStore(path) as s:  # a store kept open
        assert s.generation == 3
        for g in range(4, 7):
            sd["step"][()] = g
            assert s.save(sd)["generation"] == g
        same(sd, s.load(numpy=True))


def test_dict_order_does_not_matter(tmp_path):
    path = tmp_path / "d.ckpt"
    sd = state(3)
    ckpt.save(sd, path)
    rev = dict(reversed(list(sd.items())))
    ckpt.save(rev, path)
    same(sd, ckpt.load(path, numpy=True))


def test_mismatches_are_named(tmp_path):
    path = tmp_path / "e.ckpt"
    sd = state(4)
    ckpt.save(sd, path)
    other = dict(sd)
    other["layer.bias"] = np.zeros(301, np.float32)
    with pytest.raises(deepwell.InvalidArgument, match=r"'layer.bias' has 1200 bytes, expected 1204.*replace=True"):
        ckpt.save(other, path)
    other = dict(sd)
    other["layer.bias"] = sd["layer.bias"].astype(np.float64)
    with pytest.raises(deepwell.InvalidArgument, match="'layer.bias'"):
        ckpt.save(other, path)
    other = dict(sd)
    other["new"] = np.zeros(3)
    with pytest.raises(deepwell.InvalidArgument, match="'new'"):
        ckpt.save(other, path)
    # replace=True makes a new store of the new tensors
    ckpt.save(other, path, replace=True)
    same(other, ckpt.load(path, numpy=True))
    assert ckpt.generation(path) == 1
    # load into tensors of another shape, or with names missing
    into = {k: np.zeros_like(v) for k, v in other.items()}
    into["layer.weight"] = np.zeros((300, 64), np.float32)
    with pytest.raises(deepwell.InvalidArgument, match=r"'layer.weight' is float32 \(300, 64\)"):
        ckpt.load(path, into=into)
    into = {"ids": np.zeros_like(other["ids"])}
    with pytest.raises(deepwell.InvalidArgument, match="missing"):
        ckpt.load(path, into=into)
    ckpt.load(path, into=into, strict=False)
    assert into["ids"].tobytes() == other["ids"].tobytes()
    with pytest.raises(deepwell.InvalidArgument, match="not a tensor"):
        ckpt.save({"x": [1, 2]}, tmp_path / "f.ckpt")


def test_a_store_kept_open_refuses_a_tensor_smaller_than_its_manifest(tmp_path):
    path = tmp_path / "k.ckpt"
    sd = {"big": np.arange(1 << 18, dtype=np.float32)}
    ckpt.save(sd, path)
    with ckpt.CheckpointStore(path) as s:
        with pytest.raises(deepwell.InvalidArgument, match=r"'big' is float32 \(2,\) \(8 bytes\).*1048576 bytes"):
            s.save({"big": np.zeros(2, np.float32)})  # the C call would read a MiB from an 8-byte array
        assert s.generation == 1


def test_missing_file_and_not_a_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError):
        ckpt.load(tmp_path / "nope.ckpt")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes())
    with pytest.raises(deepwell.IOFailure, match="no valid superblock"):
        ckpt.load(junk)
    zeros = tmp_path / "zeros.bin"
    zeros.write_bytes(bytes(1 << 20))
    with pytest.raises(deepwell.IOFailure, match="blank"):
        ckpt.load(zeros)
    # save does not overwrite a file that is not a store unless told to
    with pytest.raises(deepwell.IOFailure):
        ckpt.save(state(), junk)
    ckpt.save(state(), junk, replace=True)
    same(state(), ckpt.load(junk, numpy=True))


def _find(data: bytes, needle: bytes) -> int:
    i = data.find(needle)
    assert i >= 0 and data.find(needle, i + 1) < 0
    return i


def test_corruption_is_named_and_verify_first_protects(tmp_path):
    path = tmp_path / "g.ckpt"
    sd = state(5)
    ckpt.save(sd, path)
    raw = bytearray(path.read_bytes())
    at = _find(bytes(raw), sd["ids"].tobytes()[:256])
    raw[at + 100] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(deepwell.IOFailure, match=r"buffer 'ids': unit 0 .* does not match its checksum"):
        ckpt.verify(path)
    into = {k: np.full_like(v, 1) for k, v in sd.items()}
    before = {k: v.copy() for k, v in into.items()}
    with pytest.raises(deepwell.IOFailure, match="'ids'"):
        ckpt.load(path, into=into, verify_first=True)
    same(before, into)
    with pytest.raises(deepwell.IOFailure, match="partly overwritten"):
        ckpt.load(path, into=into)


def test_a_corrupt_newest_superblock_is_reported(tmp_path):
    path = tmp_path / "h.ckpt"
    first = state(6)
    ckpt.save(first, path)
    second = {k: (v + 1 if v.dtype.kind in "fi" else v) for k, v in first.items()}
    ckpt.save(second, path)  # generation 2: superblock copy 0 (bytes [0, 512))
    good = path.read_bytes()
    for at, value in ((200, good[200] ^ 1), (0, 0)):  # a flipped byte; a zeroed one (the magic)
        raw = bytearray(good)
        raw[at] = value
        path.write_bytes(bytes(raw))
        with pytest.raises(deepwell.IOFailure, match=f"checkpoint store '{path}': the newest superblock is corrupted"):
            ckpt.load(path)
        with pytest.raises(deepwell.IOFailure, match="allow_older"):
            ckpt.generation(path)
        # Chosen explicitly: the previous generation, whole.
        assert ckpt.generation(path, allow_older=True) == 1
        same(first, ckpt.load(path, numpy=True, allow_older=True))
        with ckpt.CheckpointStore(path, allow_older=True) as s:
            assert s.generation == 1
    # A blank copy is a save that did not finish: the previous one, silently.
    raw = bytearray(good)
    raw[0:512] = bytes(512)
    path.write_bytes(bytes(raw))
    assert ckpt.generation(path) == 1
    same(first, ckpt.load(path, numpy=True))
    raw[65536 + 200] ^= 1  # copy 1 too: nothing valid left
    path.write_bytes(bytes(raw))
    with pytest.raises(deepwell.IOFailure, match="checksum mismatch"):
        ckpt.load(path)
    # Saving on from the older generation, chosen explicitly, mends the store.
    raw = bytearray(good)
    raw[200] ^= 1
    path.write_bytes(bytes(raw))
    assert ckpt.save(second, path, allow_older=True)["generation"] == 2
    same(second, ckpt.load(path, numpy=True))


def test_an_incremental_save_rewrites_a_corrupt_idle_slot(tmp_path):
    path = tmp_path / "i.ckpt"
    sd = state(8)
    ckpt.save(sd, path)  # generation 1: slot 1
    ckpt.save(sd, path)  # generation 2: slot 0; slot 1 idle, with the same bytes
    raw = bytearray(path.read_bytes())
    needle = sd["ids"].tobytes()[:256]
    first = raw.find(needle)
    second = raw.find(needle, first + 1)
    assert 0 <= first < second  # slot 0, then slot 1
    raw[second + 40] ^= 0x08
    path.write_bytes(bytes(raw))
    info = ckpt.save(sd, path)  # generation 3: slot 1; every hash equals its table's
    assert info["generation"] == 3 and info["incremental"]
    assert info["units_written"] == 1
    same(sd, ckpt.load(path, numpy=True))
    assert ckpt.verify(path) == 3


def test_an_empty_file_is_an_io_error(tmp_path):
    path = tmp_path / "empty.ckpt"
    path.write_bytes(b"")
    with pytest.raises(deepwell.IOFailure, match=f"'{path}': the file is empty \\(0 bytes\\): not a deepwell checkpoint"):
        ckpt.load(path)
    with pytest.raises(deepwell.IOFailure, match="empty"):
        ckpt.generation(path)


_KILLED_SAVE = """
import os, sys
import numpy as np
import deepwell.checkpoint as ckpt
def killed(self, state):
    os._exit(9)  # as a kill would: no cleanup
ckpt.CheckpointStore.save = killed
ckpt.save({"w": np.arange(300000, dtype=np.float32)}, sys.argv[1])
"""


def test_the_temporary_file_of_a_killed_first_save_is_removed(tmp_path):
    import fcntl
    import subprocess
    import sys

    path = tmp_path / "k.ckpt"
    tmp = tmp_path / "k.ckpt.deepwell-tmp"
    other = tmp_path / "k.ckpt.deepwell-tmp.mine"
    other.write_bytes(b"not ours")
    r = subprocess.run([sys.executable, "-c", _KILLED_SAVE, str(path)])
    assert r.returncode == 9
    assert not path.exists() and tmp.stat().st_size > 1 << 20  # a full-size store left behind
    stale = tmp.read_bytes()
    # A save in progress holds the file locked: it stays.
    with open(tmp, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(FileNotFoundError):
            ckpt.load(path)
        assert tmp.exists()
    # Unlocked, it is stale: the next open of the path removes it, and only it.
    with pytest.raises(FileNotFoundError):
        ckpt.load(path)
    assert not tmp.exists()
    assert other.read_bytes() == b"not ours"
    # The same beside an existing store, on load.
    sd = state(9)
    ckpt.save(sd, path)
    tmp.write_bytes(stale)
    same(sd, ckpt.load(path, numpy=True))
    assert not tmp.exists()
    assert other.read_bytes() == b"not ours"


# ---- torch ----

def test_torch_state_dicts_on_the_cpu(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 32)).sum().backward()
    opt.step()
    sd = {f"model.{k}": v for k, v in model.state_dict().items()}
    sd.update(ckpt.flatten(opt.state_dict(), prefix="optim"))
    sd["half"] = torch.randn(33, 3).to(torch.bfloat16)
    sd["strided"] = torch.randn(10, 10).t()  # not contiguous
    path = tmp_path / "t.ckpt"
    ckpt.save(sd, path)
    got = ckpt.load(path)
    for k, v in sd.items():
        g = got[k]
        if isinstance(v, np.ndarray):
            assert np.asarray(g).tobytes() == v.tobytes(), k
            continue
        assert g.dtype == v.dtype and g.shape == v.shape, k
        assert torch.equal(g.view(torch.uint8) if g.dim() else g, v.contiguous().view(torch.uint8) if v.dim() else v), k
    # into a fresh model's state_dict, in place
    model2 = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    into = {f"model.{k}": v for k, v in model2.state_dict().items()}
    ckpt.load(path, into=into, strict=False)
    for k, v in model.state_dict().items():
        assert torch.equal(model2.state_dict()[k], v), k


def test_torch_cuda_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    if not (deepwell.cuda_available() and torch.cuda.is_available()):
        pytest.skip("needs a CUDA GPU")
    g = torch.Generator(device="cuda").manual_seed(1)
    sd = {"w": torch.randn(1024, 1024, device="cuda", generator=g), "b": torch.randn(1024, device="cuda", generator=g),
          "step": torch.tensor(3.0), "h": torch.randn(777, device="cuda", generator=g).half()}
    path = tmp_path / "cuda.ckpt"
    info = ckpt.save(sd, path)
    assert info["generation"] == 1
    back = ckpt.load(path, device="cuda")
    for k in sd:
        assert back[k].device.type == ("cpu" if k == "step" else "cuda") or k == "step"
        assert torch.equal(back[k].cpu(), sd[k].cpu()), k
    into = {k: torch.zeros_like(v) for k, v in sd.items()}
    ckpt.load(path, into=into)
    for k in sd:
        assert torch.equal(into[k], sd[k]), k
    sd["w"][5, 5] += 1
    ckpt.save(sd, path)
    sd["w"][7, 7] += 1
    info = ckpt.save(sd, path)
    assert info["incremental"] and info["units_written"] <= 2, info
    cpu = ckpt.load(path)
    assert torch.equal(cpu["w"], sd["w"].cpu())
