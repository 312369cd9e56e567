"""Arrays of drives from Python: deepwell.open(stripe=[...]) and deepwell.open(mirror=[...]) over
files, with CPU clients. Rows written land on the member files where the layout puts them (read back
with plain file reads), rows read come back equal, and bad arrays are refused naming the problem."""
import numpy as np
import pytest

import deepwell

ROW = 64


def rows_of(n: int) -> np.ndarray:
    return (np.arange(n * ROW, dtype=np.uint64) * 2654435761 % 251).astype(np.uint8).reshape(n, ROW)


def write_all(layout, members, n, **kw):
    data = rows_of(n)
    idx = np.random.default_rng(3).permutation(n)
    with deepwell.open(dtype="uint8", shape=(n, ROW), device="cpu", cache_size="256KiB", create=True,
                       **{layout: members}, **kw) as a:
        assert a.layout == layout and a.members == tuple(str(m) for m in members)
        a.scatter(idx, data[idx])
    with deepwell.open(dtype="uint8", shape=(-1, ROW), device="cpu", cache_size="256KiB",
                       **{layout: members}, **kw) as a:
        assert a.shape == (n, ROW)
        np.testing.assert_array_equal(a.gather(idx), data[idx])
        route = a.route
    return data, route


def test_a_stripe_puts_each_chunk_on_its_member(tmp_path):
    members = [tmp_path / f"m{i}" for i in range(3)]
    chunk, n = 4096, 3 * 4096
    data, route = write_all("stripe", members, n, chunk=chunk)
    assert "stripe of 3" in route, route
    flat = data.reshape(-1)
    files = [np.fromfile(m, dtype=np.uint8) for m in members]
    assert all(f.size == flat.size // 3 for f in files)
    chunks = flat.reshape(-1, chunk)  # chunk c on member c % 3, at (c // 3) * chunk
    for c in range(chunks.shape[0]):
        np.testing.assert_array_equal(files[c % 3][(c // 3) * chunk:(c // 3 + 1) * chunk], chunks[c])


def test_a_mirror_puts_everything_on_every_member(tmp_path):
    members = [tmp_path / "a", tmp_path / "b"]
    data, route = write_all("mirror", members, 8192)
    assert "mirror of 2" in route, route
    for m in members:
        np.testing.assert_array_equal(np.fromfile(m, dtype=np.uint8), data.reshape(-1))


def test_bad_arrays_are_refused_naming_the_problem(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    kw = dict(dtype="uint8", shape=(-1, ROW), device="cpu")
    with pytest.raises(deepwell.InvalidArgument, match="no members"):
        deepwell.open(stripe=[], **kw)
    with pytest.raises(deepwell.InvalidArgument, match="a list of paths"):
        deepwell.open(mirror=str(a), **kw)
    with pytest.raises(deepwell.InvalidArgument, match="stripe and mirror"):
        deepwell.open(stripe=[a], mirror=[b], **kw)
    with pytest.raises(deepwell.InvalidArgument, match="path and stripe"):
        deepwell.open(a, stripe=[b], **kw)
    with pytest.raises(deepwell.InvalidArgument, match="stripe only"):
        deepwell.open(mirror=[a, b], chunk=4096, **kw)
    with pytest.raises(deepwell.IOFailure, match=f"member 0 of the stripe: open {a}"):
        deepwell.open(stripe=[a, b], **kw)  # missing, no create
    a.write_bytes(bytes(1 << 20))
    b.write_bytes(bytes(2 << 20))
    with pytest.raises(deepwell.InvalidArgument, match="power of two"):
        deepwell.open(stripe=[a, b], chunk=3000, **kw)
    with pytest.raises(deepwell.InvalidArgument, match="differ in size"):
        deepwell.open(mirror=[a, b], **kw)


@pytest.mark.parametrize("layout", ["stripe", "mirror"])
def test_create_never_grows_members_that_are_there(tmp_path, layout):
    there = tmp_path / "m0"
    np.arange(1 << 14, dtype=np.int64).tofile(there)  # 128 KiB
    missing = tmp_path / "m1"
    with pytest.raises(deepwell.InvalidArgument, match="does not grow"):
        deepwell.open(dtype="int64", shape=(10 ** 6,), create=True, device="cpu", **{layout: [there, missing]})
    assert there.stat().st_size == 128 << 10
    np.testing.assert_array_equal(np.fromfile(there, np.int64), np.arange(1 << 14, dtype=np.int64))
    # the other way round: the member made for the failed open is gone again
    with pytest.raises(deepwell.InvalidArgument, match="does not grow"):
        deepwell.open(dtype="int64", shape=(10 ** 6,), create=True, device="cpu", **{layout: [missing, there]})
    assert not missing.exists()
    assert there.stat().st_size == 128 << 10
