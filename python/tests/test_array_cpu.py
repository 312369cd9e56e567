"""The package with CPU clients (device="cpu"): runs everywhere, CI included.
Every read is compared byte for byte with the file's contents."""
import os
import threading

import numpy as np
import pytest

import deepwell


def open_cpu(path, **kw):
    kw.setdefault("device", "cpu")
    return deepwell.open(path, **kw)


@pytest.mark.parametrize("row_bytes,page", [(256, 4096), (4096, 4096), (12288, 4096), (3000, 4096), (8, 512)])
def test_gather_matches_file(make_file, row_bytes, page):
    # packed rows, a row per page, rows spanning pages, rows straddling pages, tiny rows
    rows = 4000
    path, data = make_file(rows, row_bytes)
    with open_cpu(path, dtype="uint8", shape=(-1, row_bytes), page_size=page, cache_size="1MiB") as a:
        assert a.shape == (rows, row_bytes)
        rng = np.random.default_rng(1)
        for dtype in (np.int64, np.int32):
            idx = rng.integers(0, rows, 3000).astype(dtype)
            out = a.gather(idx)
            assert out.dtype == np.uint8 and out.shape == (3000, row_bytes)
            np.testing.assert_array_equal(out, data[idx])


def test_typed_rows_and_indexing(make_file):
    path, data = make_file(1000, 64 * 4)
    feats = data.view(np.float32).reshape(1000, 64)
    with open_cpu(path, dtype="float32", shape=(-1, 64)) as a:
        np.testing.assert_array_equal(a[7], feats[7])
        np.testing.assert_array_equal(a[-1], feats[-1])
        np.testing.assert_array_equal(a[10:20:3], feats[10:20:3])
        np.testing.assert_array_equal(a[[5, 5, 0]], feats[[5, 5, 0]])
        out = np.empty((2, 64), np.float32)
        assert a.gather(np.array([3, 4]), out=out) is out
        np.testing.assert_array_equal(out, feats[3:5])
        assert len(a) == 1000


def test_concurrent_gathers_under_eviction(make_file):
    # 8 MiB of data through a 1 MiB cache, four threads at once.
    rows, rb = 2048, 4096
    path, data = make_file(rows, rb)
    failures = []
    with open_cpu(path, dtype="uint8", shape=(-1, rb), cache_size="1MiB", cpu_threads=4) as a:
        def worker(seed):
            rng = np.random.default_rng(seed)
            for _ in range(20):
                idx = rng.integers(0, rows, 500)
                if not np.array_equal(a.gather(idx), data[idx]):
                    failures.append(seed)
        ts = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in ts)
        st = a.stats()
        assert st["evictions"] > 0 and st["misses"] > 0
    assert not failures


def test_scatter_flush_reopen(make_file):
    rows, rb = 3000, 512
    path, data = make_file(rows, rb)
    rng = np.random.default_rng(3)
    idx = rng.choice(rows, 1000, replace=False)
    new = rng.integers(0, 256, (1000, rb), dtype=np.uint8)
    with open_cpu(path, dtype="uint8", shape=(-1, rb), writable=True, cache_size="256KiB") as a:
        a.scatter(idx, new)
        np.testing.assert_array_equal(a.gather(idx), new)  # read back through the cache
        a.flush()
    expect = data.copy()
    expect[idx] = new
    np.testing.assert_array_equal(np.fromfile(path, np.uint8).reshape(rows, rb), expect)


def test_setitem_and_create(tmp_path):
    path = str(tmp_path / "new.f32")
    with deepwell.open(path, dtype="float32", shape=(100, 16), create=True, device="cpu") as a:
        a[3] = np.full(16, 2.5, np.float32)
        a[[10, 11]] = np.ones((2, 16), np.float32)
        np.testing.assert_array_equal(a[3], np.full(16, 2.5, np.float32))
    # a new writable file is padded to a 4 KiB boundary (writable datasets end on a block)
    assert os.path.getsize(path) == 8192
    got = np.fromfile(path, np.float32)[:1600].reshape(100, 16)
    assert (got[3] == 2.5).all() and (got[10:12] == 1).all() and (got[0] == 0).all()


def test_create_opens_a_file_that_is_there_and_never_grows_it(tmp_path):
    path = str(tmp_path / "again.f32")
    with deepwell.open(path, dtype="float32", shape=(200,), create=True, device="cpu") as a:
        a[0:200] = np.arange(200, dtype=np.float32)
    # create again: the same file, its rows kept; and writable without create
    with deepwell.open(path, dtype="float32", shape=(200,), create=True, device="cpu") as a:
        assert a.shape == (200,)
        np.testing.assert_array_equal(a[0:200], np.arange(200, dtype=np.float32))
    with deepwell.open(path, dtype="float32", shape=(200,), writable=True, device="cpu") as a:
        a[199] = 7.0
    assert np.fromfile(path, np.float32)[199] == 7.0
    assert os.path.getsize(path) == 4096
    # a file too short for the rows asked for is named, not grown
    short = str(tmp_path / "short.f32")
    np.arange(100, dtype=np.float32).tofile(short)
    with pytest.raises(deepwell.InvalidArgument, match="does not grow"):
        deepwell.open(short, dtype="float32", shape=(200,), create=True, device="cpu")
    assert os.path.getsize(short) == 400
    np.testing.assert_array_equal(np.fromfile(short, np.float32), np.arange(100, dtype=np.float32))


def test_host_memory_array():
    with deepwell.Array(None, dtype="int64", shape=(500, 4), device="cpu") as a:
        src = np.arange(2000, dtype=np.int64).reshape(500, 4)
        a.scatter(np.arange(500), src)
        np.testing.assert_array_equal(a[::-1], src[::-1])


def test_errors_name_the_problem(make_file, tmp_path):
    path, _ = make_file(100, 64)
    with open_cpu(path, dtype="uint8", shape=(-1, 64)) as a:
        with pytest.raises(IndexError, match="index 100 is out of range for 100 rows"):
            a.gather(np.array([0, 100]))
        with pytest.raises(IndexError, match="index -1 is out of range"):
            a.gather(np.array([-1], dtype=np.int32))
        with pytest.raises(IndexError):
            a[100]
        with pytest.raises(ValueError, match="int32 or int64"):
            a.gather(np.array([1.0]))
        with pytest.raises(ValueError, match="one-dimensional"):
            a.gather(np.zeros((2, 2), np.int64))
        with pytest.raises(ValueError, match="out must be a contiguous array of 2 rows"):
            a.gather(np.array([1, 2]), out=np.empty((2, 63), np.uint8))
        with pytest.raises(ValueError, match="read-only"):
            a.scatter(np.array([1]), np.zeros((1, 64), np.uint8))
        with pytest.raises(TypeError, match="cannot read"):
            a.gather("12")
        # the array still works after errors
        assert a.gather(np.array([5])).shape == (1, 64)
    with pytest.raises(ValueError, match="closed"):
        a.gather(np.array([1]))
    with pytest.raises(FileNotFoundError):
        deepwell.open(str(tmp_path / "missing"), device="cpu")
    with pytest.raises(ValueError, match="needs 6464 bytes"):
        open_cpu(path, dtype="uint8", shape=(101, 64))
    with pytest.raises(ValueError, match="not a whole number of rows of 12 bytes"):
        open_cpu(path, dtype="float32", shape=(-1, 3))
    with pytest.raises(ValueError, match="page size"):
        open_cpu(path, dtype="uint8", shape=(-1, 64), page_size=3000)
    with pytest.raises(ValueError, match="'lots' is not a size"):
        open_cpu(path, dtype="uint8", shape=(-1, 64), cache_size="lots")
    with pytest.raises(ValueError, match="device must be"):
        open_cpu(path, device="gpu")
    # Negative counts and offsets are refused by name, not wrapped to 2^64 - n.
    with pytest.raises(ValueError, match="a size cannot be negative: -5"):
        open_cpu(path, dtype="uint8", shape=(-1, 64), cache_size=-5)
    with pytest.raises(ValueError, match="a size cannot be negative"):
        open_cpu(path, dtype="uint8", shape=(-1, 64), cache_size="-1 GiB")
    with pytest.raises(ValueError, match="offset cannot be negative: -64"):
        open_cpu(path, dtype="uint8", shape=(-1, 64), offset=-64)
    with pytest.raises(ValueError, match="pollers cannot be negative"):
        open_cpu(path, dtype="uint8", shape=(-1, 64), pollers=-1)
    with pytest.raises(ValueError, match="more than 2\\^64 bytes"):
        open_cpu(path, dtype="uint8", shape=(-1, 64), cache_size=1 << 70)
    with pytest.raises(ValueError, match="'99999999 TiB' is not a size"):  # past 2^63
        open_cpu(path, dtype="uint8", shape=(-1, 64), cache_size="99999999 TiB")
    with pytest.raises(ValueError, match="is not a size"):
        open_cpu(path, dtype="uint8", shape=(-1, 64), cache_size="1e400")
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds"):
            open_cpu(path, dtype="uint8", shape=(-1, 64), timeout=bad)
    with pytest.raises(ValueError, match="unknown dtype"):
        open_cpu(path, dtype="float13")
    with pytest.raises(ValueError, match="NumPy has no bfloat16"):
        with open_cpu(path, dtype="bfloat16", shape=(-1, 32)) as b:
            b[0]


def test_no_gpu_is_reported_clearly(make_file):
    if deepwell.cuda_available():
        pytest.skip("this machine has a GPU")
    path, _ = make_file(10, 64)
    with pytest.raises(deepwell.CudaUnavailable):
        deepwell.open(path, dtype="uint8", shape=(-1, 64), device="cuda")
    # the default device is the CPU when there is no GPU
    with deepwell.open(path, dtype="uint8", shape=(-1, 64)) as a:
        assert not a.on_gpu


def test_uring_baseline_reads_the_same_rows(make_file):
    path, data = make_file(1000, 4096)
    idx = np.random.default_rng(5).integers(0, 1000, 700)
    out = np.empty((700, 4096), np.uint8)
    from deepwell.baselines import uring_read_rows
    secs = uring_read_rows(path, idx, 4096, depth=16, threads=2, out=out)
    assert secs > 0
    np.testing.assert_array_equal(out, data[idx])
    with pytest.raises(OSError, match="short read of row 5000"):
        uring_read_rows(path, np.array([5000]), 4096)


def test_odirect_reads(make_file):
    path, data = make_file(512, 4096)
    try:
        a = open_cpu(path, dtype="uint8", shape=(-1, 4096), odirect=True)
    except OSError as e:
        pytest.skip(f"O_DIRECT not supported here: {e}")
    with a:
        assert not a.direct_tier
        # The route says so: the controller's queues, the file read with O_DIRECT.
        assert "O_DIRECT" in a.route and "queued to the controller in this process" in a.route, a.route
        idx = np.random.default_rng(2).integers(0, 512, 400)
        np.testing.assert_array_equal(a.gather(idx), data[idx])
        assert a.stats()["controller_reads"] > 0


@pytest.mark.parametrize("row_bytes", [4096, 3000, 64])
def test_in_place_reads_skip_the_cache(make_file, row_bytes):
    path, data = make_file(2000, row_bytes)
    with open_cpu(path, dtype="uint8", shape=(-1, row_bytes), cache_reads=False) as a:
        assert a.direct_tier and a.in_place
        assert "the direct tier: a read-only mapping of the file" in a.route, a.route
        idx = np.random.default_rng(4).integers(0, 2000, 3000)
        np.testing.assert_array_equal(a.gather(idx), data[idx])
        assert a.stats()["accesses"] == 0  # nothing went through the cache
        with pytest.raises(IndexError, match="index 2000 is out of range"):
            a.gather(np.array([3, 2000]))


def test_arrays_left_open_are_closed_at_exit(make_file, tmp_path):
    # A program that never closes a writable array: its scatter still reaches the file at exit.
    import subprocess
    import sys
    path, data = make_file(64, 512)
    code = (f"import deepwell, numpy as np\n"
            f"a = deepwell.open({path!r}, dtype='uint8', shape=(-1, 512), writable=True, device='cpu')\n"
            f"a.scatter(np.array([3]), np.full((1, 512), 9, np.uint8))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (np.fromfile(path, np.uint8).reshape(64, 512)[3] == 9).all()


@pytest.mark.parametrize("cache_reads", [True, False])
def test_gathers_see_scattered_rows(cache_reads):
    # path=None: a writable array in host memory, which has a direct tier.
    # Gathers that read it in place would miss rows still dirty in the cache.
    with open_cpu(None, dtype="uint8", shape=(64, 256), cache_reads=cache_reads) as a:
        assert a.in_place == (not cache_reads)  # in place both ways, or through the cache both ways
        rows = np.full((1, 256), 0xAB, np.uint8)
        a.scatter(np.array([5]), rows)
        np.testing.assert_array_equal(a.gather(np.array([5])), rows)
        np.testing.assert_array_equal(a.gather(np.array([4, 6])), np.zeros((2, 256), np.uint8))


def test_writable_file_with_cache_reads_off_reads_through_the_cache(make_file):
    # A writable file: its direct tier (a read-only mapping) cannot take
    # scatters, so gathers go through the cache, which holds them.
    path, data = make_file(256, 4096)
    with open_cpu(path, dtype="uint8", shape=(-1, 4096), writable=True, cache_reads=False, cache_size="1MiB") as a:
        assert not a.in_place
        rows = np.full((2, 4096), 0x5C, np.uint8)
        a.scatter(np.array([3, 200]), rows)
        np.testing.assert_array_equal(a.gather(np.array([3, 200, 4])), np.vstack([rows, data[[4]]]))


def test_arrays_on_one_file_share_its_cache(make_file):
    # Two arrays opened on the same file with the same settings share one
    # dataset and cache in the process: rows scattered through one are
    # gathered through the other before any flush.
    path, data = make_file(512, 1024)
    with open_cpu(path, dtype="uint8", shape=(-1, 1024), writable=True, cache_size="1MiB") as w, \
            open_cpu(path, dtype="uint8", shape=(-1, 1024), cache_size="1MiB") as r:
        np.testing.assert_array_equal(r.gather(np.array([7, 9])), data[[7, 9]])
        rows = np.full((2, 1024), 0x3C, np.uint8)
        w.scatter(np.array([7, 300]), rows)
        np.testing.assert_array_equal(r.gather(np.array([7, 300, 9])), np.vstack([rows, data[[9]]]))
        with pytest.raises(deepwell.Error, match="read-only"):
            r.scatter(np.array([1]), rows[:1])
    expect = data.copy()
    expect[[7, 300]] = 0x3C
    np.testing.assert_array_equal(np.fromfile(path, np.uint8).reshape(512, 1024), expect)


def test_sizes_read_as_everywhere_else():
    """The C library's one rule for sizes (the command line's, the environment's, the server's)."""
    for text, n in [("4096", 4096), ("512K", 512 << 10), ("64 MiB", 64 << 20), ("1.5GiB", 3 << 29),
                    ("1TiB", 1 << 40), ("8kb", 8192)]:
        assert deepwell.parse_bytes(text) == n, text
    for junk in ["lots", "1.5", "1e3", "12PB", "1  GiB"]:
        with pytest.raises(deepwell.InvalidArgument, match="is not a size"):
            deepwell.parse_bytes(junk)


def test_a_route_left_for_a_slower_one_says_why(make_file, monkeypatch):
    # A file not wholly in the page cache is read through the controller, and the route says why.
    path, data = make_file(256, 4096)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    with open_cpu(path, dtype="uint8", shape=(-1, 4096)) as a:
        if a.direct_tier:
            pytest.skip("the file stayed in the page cache (the kernel kept it)")
        assert "no direct tier: only" in a.route and "was in the page cache" in a.route, a.route
        np.testing.assert_array_equal(a.gather(np.arange(256)), data)
