"""Bad input found by a sweep of the C ABI and the Python package: each is
refused by name (or, for threads sharing a handle, answered right), never a
crash, a hang, a huge allocation or a value wrapped by ctypes."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import deepwell
import deepwell.kv as kv
from deepwell import baselines
from deepwell import checkpoint as ckpt
from deepwell import vectors as dv


def test_threads_sharing_a_kv_handle_lose_nothing(tmp_path):
    store = kv.create(tmp_path / "s.kv", device="cpu", cache_size="4MiB", cpu_threads=2, value_bytes=8,
                      capacity=200000)
    wrong = []

    def worker(t):
        for b in range(25):
            keys = np.arange(1000, dtype=np.uint64) + np.uint64(t * 1_000_000 + b * 1000)
            values = (keys * np.uint64(3) + np.uint64(t)).reshape(-1, 1)
            store.set(keys, values)
            got, found = store.get(keys)
            if not found.all() or got.tobytes() != values.tobytes():
                wrong.append((t, b))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert wrong == []
    store.close()


@pytest.mark.parametrize("make", [
    lambda d: deepwell.Array(None, shape=(2**61 + 1,), dtype="float64", device="cpu"),
    lambda d: deepwell.Array(None, shape=(16, 2**32 + 1), dtype="uint8", device="cpu"),
    lambda d: kv.create(d / "a.kv", device="cpu", value_bytes=2**32 + 8, capacity=100),
    lambda d: kv.create(d / "b.kv", device="cpu", value_bytes=8, capacity=2**64 + 100),
    lambda d: kv.bytes_needed(8, 2**62),
])
def test_values_past_their_fields_are_refused_not_wrapped(tmp_path, make):
    with pytest.raises(deepwell.Error, match="too large|capacity|pass"):
        make(tmp_path)


def _in_child(code, timeout=20):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    r = _in_child(f"import deepwell\ntry:\n    deepwell.open({str(fifo)!r}, dtype='uint8', device='cpu')\n"
                  f"except deepwell.Error as e:\n    print('refused:', e)\n")
    assert r.returncode == 0, r
    assert "refused:" in r.stdout and "regular file" in r.stdout, r.stdout


def test_plain_uring_rows_refuse_a_row_with_no_offset(tmp_path):
    f = tmp_path / "rows"
    f.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(deepwell.Error, match="no byte offset"):
        baselines.uring_read_rows(f, [-(2**62)], 64)
    out = np.zeros((2, 64), np.uint8)
    baselines.uring_read_rows(f, [1, 3], 64, out=out)
    assert out[1].tobytes() == (bytes(range(256)) * 64)[192:256]


def test_a_checkpoint_manifest_with_a_negative_dimension_is_refused(tmp_path):
    with pytest.raises(deepwell.Error, match="negative dimension"):
        ckpt.CheckpointStore(tmp_path / "c.ckpt", create=True, device="cpu", specs=[("w", "float32", (-4,), 16)])


def test_a_vector_build_refuses_pages_no_index_opens(tmp_path):
    data = np.random.default_rng(1).integers(0, 255, (300, 16), dtype=np.uint8)
    with pytest.raises(deepwell.Error, match="page size"):
        dv.build(data, tmp_path / "i.dwv", page_bytes=1 << 20, threads=1)
    with pytest.raises(deepwell.Error, match="Vamana passes"):
        dv.build(data, tmp_path / "i.dwv", passes=1000, threads=1)


@pytest.mark.parametrize("direct", ["resident", "never"])
def test_a_file_truncated_under_an_array_is_named_in_the_error(tmp_path, direct):
    # "resident": the direct tier maps the file (the fault past its new end
    # is taken, not a SIGBUS); "never": the controller's read comes up short.
    path = tmp_path / "rows.bin"
    np.arange(1 << 18, dtype=np.uint64).tofile(path)  # 2 MiB, 4096 rows of 512 bytes
    a = deepwell.open(str(path), shape=(4096, 64), dtype="uint64", device="cpu", cache_size="1MiB", direct=direct)
    assert a.direct_tier == (direct == "resident")
    assert a.gather(np.array([0, 4095]))[1, 0] == 4095 * 64
    os.truncate(path, 1 << 20)
    a.clear()  # nothing cached: the next read of the lost half goes to the file
    with pytest.raises(deepwell.Error, match=r"rows\.bin.*now holds 1048576 bytes.*truncated"):
        a.gather(np.array([4095]))
    if direct == "never":
        assert a.gather(np.array([1]))[0, 0] == 64  # the half still there reads on
    else:  # zeros were read where the file was: nothing from this mapping is trusted again
        with pytest.raises(deepwell.Error, match="cut short while mapped"):
            a.gather(np.array([1]))
    a.close()
    b = deepwell.open(str(path), shape=(2048, 64), dtype="uint64", device="cpu", cache_size="1MiB", direct=direct)
    assert b.gather(np.array([2047]))[0, 0] == 2047 * 64
    b.close()


def test_clear_beside_running_gathers_waits_its_turn(tmp_path):
    # A clear emptied slots a running gather waited on: the gather failed
    # ("cache exhausted") and the clear waited out the cache's timeout.
    import time
    path = tmp_path / "rows.bin"
    np.arange(1 << 20, dtype=np.uint64).tofile(path)
    a = deepwell.open(str(path), shape=(16384, 64), dtype="uint64", device="cpu", cache_size="1MiB",
                      direct="never", timeout=3)
    stop = threading.Event()
    errors = []

    def gathers():
        rng = np.random.default_rng(1)
        while not stop.is_set():
            i = rng.integers(0, 16384, 4096)
            try:
                if not (a.gather(i)[:, 0] == i * 64).all():
                    errors.append("wrong rows")
            except deepwell.Error as e:
                errors.append(str(e))

    t = threading.Thread(target=gathers)
    t.start()
    t0 = time.monotonic()
    clears = 0
    while time.monotonic() - t0 < 1.5:
        a.clear()
        clears += 1
    stop.set()
    t.join()
    assert errors == [] and time.monotonic() - t0 < 20 and clears > 10
    a.close()


def test_a_vector_index_truncated_under_a_search_is_named(tmp_path):
    rng = np.random.default_rng(3)
    data = rng.standard_normal((2000, 16)).astype(np.float32)
    path = tmp_path / "v.dwv"
    dv.build(data, path, degree=8, list_size=16)
    index = dv.open(path, device="cpu", cache_size="256KiB")
    ids, _ = index.search(data[:20], k=5)
    assert (np.asarray(ids)[:, 0] == np.arange(20)).mean() > 0.9
    size = os.path.getsize(path)
    os.truncate(path, size // 4)  # the records' pages past it are gone
    with pytest.raises(deepwell.Error, match=r"v\.dwv.*(truncated|could not be read)"):
        for _ in range(20):  # until a search needs a lost page the cache does not hold
            index.search(rng.standard_normal((200, 16)).astype(np.float32), k=5)
    index.close()


def test_close_waits_for_calls_running_on_other_threads(tmp_path):
    # close() beside a running gather or set freed the handle under it: a segfault.
    path = tmp_path / "rows.bin"
    np.arange(1 << 20, dtype=np.uint64).tofile(path)
    store = kv.create(tmp_path / "s.kv", device="cpu", cache_size="4MiB", value_bytes=8, capacity=100000)
    for _ in range(5):
        a = deepwell.open(str(path), shape=(16384, 64), dtype="uint64", device="cpu", cache_size="1MiB")
        outcomes = []

        def gathers():
            try:
                while True:
                    i = np.arange(0, 16384, 7)
                    if not (a.gather(i)[:, 0] == i * 64).all():
                        outcomes.append("wrong")
            except deepwell.InvalidArgument as e:
                outcomes.append(str(e))

        t = threading.Thread(target=gathers)
        t.start()
        threading.Event().wait(0.05)
        a.close()
        t.join(30)
        assert not t.is_alive() and outcomes == ["the deepwell array is closed"]
    keys = np.arange(5000, dtype=np.uint64)

    def sets():
        try:
            for _ in range(200):
                store.set(keys, keys.reshape(-1, 1))
        except deepwell.InvalidArgument:
            pass

    t = threading.Thread(target=sets)
    t.start()
    threading.Event().wait(0.05)
    store.close()
    t.join(30)
    assert not t.is_alive()


def test_outputs_that_cannot_take_the_rows_are_refused(tmp_path):
    path = tmp_path / "f.bin"
    np.arange(64, dtype=np.float32).tofile(path)
    a = deepwell.open(str(path), shape=(-1, 4), dtype="float32", device="cpu")
    ro = np.memmap(path, dtype=np.float32, mode="r", shape=(2, 4))
    with pytest.raises(deepwell.InvalidArgument, match="read-only"):
        a.gather(np.array([1, 2]), out=ro)
    with pytest.raises(deepwell.InvalidArgument, match="float32"):
        a.gather(np.array([1, 2]), out=np.empty((2, 4), np.int32))
    with pytest.raises(deepwell.InvalidArgument, match="big-endian"):
        a.gather(np.array([1, 2]), out=np.empty((2, 4), ">f4"))
    assert a.gather(np.array([1, 2]))[1, 0] == 8.0
    a.close()
    with pytest.raises(deepwell.InvalidArgument, match="Python objects"):
        deepwell.open(str(path), shape=(-1, 2), dtype=object, device="cpu")
    with pytest.raises(deepwell.InvalidArgument, match="Python objects"):
        ckpt.save({"o": np.array([object(), object()])}, tmp_path / "c.ckpt")


def test_a_kv_store_has_one_opener_at_a_time(tmp_path):
    # A second opener (the CLI, or another handle) wrote the same table and
    # log: acknowledged SETs of the first were lost, and `kv check` passed.
    path = tmp_path / "two.kv"
    store = kv.create(path, device="cpu", cache_size="4MiB", value_bytes=8, capacity=1000)
    store.set(np.arange(10, dtype=np.uint64), np.arange(10, dtype=np.uint64).reshape(-1, 1))
    with pytest.raises(deepwell.Error, match=r"two\.kv.*open elsewhere"):
        kv.open(path, device="cpu", cache_size="4MiB")
    with pytest.raises(deepwell.Error, match=r"two\.kv.*open elsewhere"):
        kv.create(path, device="cpu", cache_size="4MiB", value_bytes=8, capacity=1000)
    cli = os.environ.get("DEEPWELL_CLI")
    if cli:
        r = subprocess.run([cli, "kv", "set", str(path), "100", "cli"], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "open elsewhere" in r.stderr
    store.close()
    again = kv.open(path, device="cpu", cache_size="4MiB")
    got, found = again.get(np.arange(10, dtype=np.uint64))
    assert found.all() and (got[:, 0] == np.arange(10)).all()
    again.close()


def test_an_array_of_one_file_twice_is_refused(tmp_path):
    # A stripe over one file twice wrote half its chunks over the other half.
    a = tmp_path / "s1"
    np.zeros(1 << 16, dtype=np.int64).tofile(a)
    os.link(a, tmp_path / "s1-link")
    for layout, members in (("stripe", [a, a]), ("mirror", [a, tmp_path / "s1-link"])):
        with pytest.raises(deepwell.Error, match=r"same file"):
            deepwell.open(**{layout: [str(m) for m in members]}, dtype="int64", shape=(-1,), writable=True, device="cpu")


def test_indexing_an_array_as_numpy_users_expect(tmp_path):
    path = tmp_path / "f.bin"
    np.arange(1024, dtype=np.float32).tofile(path)  # 4 KiB: a writable file is whole blocks
    with pytest.raises(deepwell.InvalidArgument, match="0 rows"):
        deepwell.open(str(path), shape=(0, 4), dtype="float32", device="cpu")
    a = deepwell.open(os.fsencode(str(path)), shape=(-1, 4), dtype="float32", device="cpu", writable=True)
    with pytest.raises(IndexError, match="boolean"):
        a[True]
    with pytest.raises(IndexError, match="rows only"):
        a[1, 2]
    a[4] = 5.0
    a[[5, 6]] = [1, 2, 3, 4]
    assert a[4].tolist() == [5.0] * 4 and a[6].tolist() == [1, 2, 3, 4]
    # any integer index type numpy takes, big-endian ones by their value
    for idx in (np.array([5, 6], ">i8"), np.array([5, 6], np.uint8), np.array([5, 6], np.uint64),
                np.array([5, 6], ">u4"), np.array([5, 6], np.int16)):
        assert a[idx].tolist() == a[[5, 6]].tolist(), idx.dtype
    with pytest.raises(IndexError, match="out of range"):
        a[np.array([2 ** 56], ">i8")]
    with pytest.raises(IndexError, match="9223372036854775813"):
        a[np.array([2 ** 63 + 5], np.uint64)]
    with pytest.raises(deepwell.InvalidArgument, match="integers"):
        a[np.array([1.0])]
    a.close()


def test_an_unchecked_failed_scatter_is_reported_by_flush_and_close(tmp_path):
    # scatter(check=False) with a bad index, then flush() and close() both
    # succeeded: the write was lost without a word.
    path = tmp_path / "w.bin"
    np.zeros(4096, dtype=np.float32).tofile(path)
    a = deepwell.open(str(path), shape=(-1, 4), dtype="float32", device="cpu", writable=True)
    a.scatter(np.array([1, 5000]), np.ones((2, 4), np.float32), check=False)
    with pytest.raises(deepwell.IndexOutOfRange, match="5000"):
        a.flush()
    a.flush()  # said once
    a.scatter(np.array([7000]), np.ones((1, 4), np.float32), check=False)
    with pytest.raises(deepwell.IndexOutOfRange, match="7000"):
        a.close()


def test_missing_files_raise_file_not_found_as_deepwell_open_does(tmp_path):
    for opener in (lambda p: kv.open(p, device="cpu"), lambda p: dv.open(p, device="cpu"),
                   lambda p: deepwell.open(p, dtype="uint8", device="cpu")):
        with pytest.raises(FileNotFoundError, match="absent"):
            opener(str(tmp_path / "absent"))


def test_types_an_array_or_checkpoint_would_read_wrong_are_refused(tmp_path):
    path = tmp_path / "f.f32"
    np.arange(64, dtype=np.float32).tofile(path)
    with pytest.raises(deepwell.InvalidArgument, match="big-endian"):
        deepwell.open(str(path), dtype=">f4", device="cpu")  # read as this machine's floats: 3.0 was 2.3e-41
    for dt in ("U4", "S4", "V8", "datetime64[s]", [("a", "<i4"), ("b", "<f4")]):
        with pytest.raises(deepwell.InvalidArgument, match="one number type"):
            deepwell.open(str(path), dtype=dt, device="cpu")
    with deepwell.open(str(path), dtype="float32", device="cpu") as a:
        for key in ([True, False, True], [1.7, 2.9]):  # rows 1, 0, 1 and rows 1, 2 before
            with pytest.raises(IndexError, match="must be ints"):
                a[key]
        for key in (2.0, None, Ellipsis, "3"):
            with pytest.raises(IndexError, match="rows are indexed by"):
                a[key]
        assert a[[1, 2]].tolist() == [1.0, 2.0]
    # a checkpoint of what load could not make again
    for arr in (np.zeros(3, "U4"), np.zeros(3, [("a", "<i4"), ("b", "<f8")]), np.zeros(3, "V12")):
        with pytest.raises(deepwell.InvalidArgument, match="one number"):
            deepwell.checkpoint.save({"x": arr}, str(tmp_path / "c.dwckpt"))


def test_kv_keys_and_outputs_are_taken_as_given_or_refused(tmp_path):
    with deepwell.kv.create(str(tmp_path / "k.kv"), value_bytes=8, capacity=100, device="cpu",
                            cache_size="4MiB") as s:
        s.set([1], np.arange(8, dtype=np.uint8).reshape(1, 8))
        ro = np.frombuffer(bytes(8), dtype=np.uint8)
        with pytest.raises(deepwell.InvalidArgument, match="read-only"):
            s.get([1], out=ro)  # it had filled an immutable bytes object
        for key in (1.9, "1", True):  # 1.9 and "1" were key 1
            with pytest.raises(deepwell.InvalidArgument, match="a key is an int"):
                s[key]
        with pytest.raises(deepwell.InvalidArgument, match="above 2\\*\\*64 - 3"):
            s.set(np.array([2 ** 64 - 1], np.uint64), np.zeros((1, 8), np.uint8))  # counted, not refused, before
        assert s[1].tolist() == list(range(8)) and 1 in s


def test_a_vector_search_checks_k_before_it_allocates(tmp_path):
    rows = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
    deepwell.vectors.build(rows, str(tmp_path / "v.dwv"))
    with deepwell.vectors.open(str(tmp_path / "v.dwv"), device="cpu") as ix:
        with pytest.raises(deepwell.InvalidArgument, match="larger than the index"):
            ix.search(rows[:2], k=2 ** 31)  # a MemoryError of 7.8 TiB before
        with pytest.raises(deepwell.InvalidArgument, match="overflow float32"):
            ix.search(rows[:2] * np.float32(1e30), k=5)  # every distance inf: the same ids for every query
    with pytest.raises(deepwell.InvalidArgument, match="overflow float32"):
        deepwell.vectors.build(np.full((50, 8), 1e38, np.float32), str(tmp_path / "big.dwv"))


def test_a_bad_setting_is_named_at_import():
    # DEEPWELL_LOG=loud was ignored; the command line and the package check every setting up front.
    env = dict(os.environ, DEEPWELL_LOG="loud")
    r = subprocess.run([sys.executable, "-c", "import deepwell"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "DEEPWELL_LOG=loud is not one of" in r.stderr, r.stderr[-500:]
