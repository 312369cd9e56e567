"""deepwell.vectors with CPU clients: recall against brute force, the
answers' shapes and order, the same answers under `deepwell serve` by the
dataset's name, and bad input refused by name."""
import os

import numpy as np
import pytest

import deepwell
import deepwell.vectors as dv
from conftest import server_config, serving


def _mixture(n, dim, seed, centres):
    rng = np.random.default_rng(seed)
    c = centres[rng.integers(0, len(centres), n)]
    return (c + 0.5 * rng.standard_normal((n, dim))).astype(np.float32)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((12, 24))
    base = _mixture(3000, 24, 4, centres)
    queries = _mixture(60, 24, 5, centres)
    path = tmp_path_factory.mktemp("vectors") / "base.dwv"
    report = dv.build(base, path, degree=20, list_size=40)
    d = ((queries[:, None, :].astype(np.float64) - base[None, :, :]) ** 2).sum(-1)
    truth = np.argsort(d, axis=1, kind="stable")[:, :10]
    return base, queries, path, report, truth


def test_search_finds_the_nearest(data):
    base, queries, path, report, truth = data
    assert report["vectors"] == 3000 and report["edges"] > 3000
    with dv.open(path, device="cpu", cache_size="128KiB") as index:
        assert len(index) == 3000 and index.dim == 24
        info = index.info()
        assert info["type"] == "float32" and info["metric"] == "l2"
        assert info["records_bytes"] > 4 * info["cache_bytes"]  # searched under eviction
        ids, dist = index.search(queries, k=10, list_size=64)
        assert ids.shape == (60, 10) and ids.dtype == np.int64 and dist.dtype == np.float32
        recall = np.mean([len(set(ids[i]) & set(truth[i])) / 10 for i in range(60)])
        assert recall >= 0.9, recall
        assert np.all(np.diff(dist, axis=1) >= 0)
        # distances are those of the ids
        exact = ((queries[:, None, :] - base[ids]) ** 2).sum(-1)
        np.testing.assert_allclose(dist, exact, rtol=1e-4, atol=1e-4)
        # the same again, and with the counts
        ids2, dist2, counts = index.search(queries, k=10, list_size=64, return_counts=True)
        np.testing.assert_array_equal(ids, ids2)
        assert counts["expansions"] >= 60 * 10 and counts["bad_ids"] == 0


def test_the_page_rules_and_their_counts(data):
    """Whole pages (nearer or all page mates) fetch fewer pages than picked
    records for at least the recall; the counts say so; bad options are named."""
    _, queries, path, _, truth = data
    with dv.open(path, device="cpu", cache_size="128KiB") as index:
        got = {}
        for rule in ("nearer", "all", "picked"):
            ids, _, c = index.search(queries, k=10, list_size=64, pages=rule, return_counts=True)
            got[rule] = (np.mean([len(set(ids[i]) & set(truth[i])) / 10 for i in range(60)]), c)
        recall, picked = got["picked"]
        assert picked["fetches"] == picked["expansions"] and picked["page_mates"] == 0
        for rule in ("nearer", "all"):
            r, c = got[rule]
            assert c["page_mates"] > 0 and c["fetches"] <= c["expansions"] - c["page_mates"]
            assert c["fetches"] < picked["fetches"], (rule, c, picked)
        assert got["nearer"][0] >= min(recall, 0.95), got
        # the default is "nearer"
        _, _, c = index.search(queries, k=10, list_size=64, return_counts=True)
        assert c == got["nearer"][1]
        _, _, c = index.search(queries, k=10, list_size=64, max_expansions=20, return_counts=True)
        assert c["expansions"] <= 60 * 20
        with pytest.raises(deepwell.InvalidArgument, match="pages must be one of"):
            index.search(queries, k=10, pages="every")
        with pytest.raises(deepwell.InvalidArgument, match="max_expansions"):
            index.search(queries, k=10, max_expansions=5)
        with pytest.raises(deepwell.InvalidArgument, match="does not fit 32 bits"):
            index.search(queries, k=10, list_size=2**32 + 64)


def test_a_sharded_build_and_an_older_callers_build_options(data, tmp_path):
    """shard_vectors builds the graph in overlapping shards, merged: recall within a few points of the
    build at once; below 1024 it is refused by name. A caller whose options end before the field
    (the first layout, 32 bytes) builds at once: the default's file, byte for byte."""
    import ctypes
    base, queries, path, _, truth = data

    def recall(p):
        with dv.open(p, device="cpu", cache_size="128KiB") as index:
            ids, _ = index.search(queries, k=10, list_size=64)
        return np.mean([len(set(ids[i]) & set(truth[i])) / 10 for i in range(60)])

    sharded = tmp_path / "sharded.dwv"
    dv.build(base, sharded, degree=20, list_size=40, shard_vectors=1024)
    assert recall(sharded) >= 0.9 and recall(sharded) >= recall(path) - 0.03, (recall(sharded), recall(path))
    with pytest.raises(deepwell.InvalidArgument, match="shard_vectors 1000"):
        dv.build(base, tmp_path / "small.dwv", shard_vectors=1000)
    o = dv._BuildOptions()
    dv.lib.dw_vectors_build_options_init(ctypes.byref(o))
    o.degree, o.list, o.shard_vectors, o.size = 20, 40, 1024, 32
    older = tmp_path / "older.dwv"
    a = np.ascontiguousarray(base)
    dv.check(dv.lib.dw_vectors_build(a.ctypes.data, 3000, 24, 0, 0, os.fspath(older).encode(), ctypes.byref(o), None))
    assert older.read_bytes() == path.read_bytes()


def test_an_entry_sample_and_an_older_callers_options(data):
    """entry_sample starts each query at the nearest (by code) of a spread sample: fewer pages fetched
    at a short list; past its limit it is refused by name. A caller whose options end before the
    field (the first layout, 24 bytes) gets the default (1024)."""
    import ctypes
    _, queries, path, _, truth = data
    with dv.open(path, device="cpu", cache_size="128KiB") as index:
        ids0, _, c0 = index.search(queries, k=10, list_size=16, entry_sample=0, return_counts=True)
        idsd, _, cd = index.search(queries, k=10, list_size=16, return_counts=True)  # the default: 1024
        ids1, _, c1 = index.search(queries, k=10, list_size=16, entry_sample=512, return_counts=True)
        r0, r1 = (np.mean([len(set(i[q]) & set(truth[q])) / 10 for q in range(60)]) for i in (ids0, ids1))
        assert c1["fetches"] < c0["fetches"] and r1 >= r0 - 0.01, (c0, c1, r0, r1)
        with pytest.raises(deepwell.InvalidArgument, match="entry_sample at most 65536"):
            index.search(queries, k=10, entry_sample=65537)
        # The first layout: size 24, the bytes after it (where entry_sample lies) anything.
        o = dv._SearchOptions()
        dv.lib.dw_vectors_search_options_init(ctypes.byref(o))
        o.list, o.entry_sample, o.size = 16, 512, 24
        q = np.ascontiguousarray(queries, dtype=np.float32)
        ids = np.empty((60, 10), np.uint32)
        dist = np.empty((60, 10), np.float32)
        r = dv._Counts()
        dv.check(dv.lib.dw_vectors_search_with(index._handle(), q.ctypes.data, 60, ctypes.byref(o), 0, ids.ctypes.data,
                                               dist.ctypes.data, ctypes.byref(r)))
        np.testing.assert_array_equal(ids.astype(np.int64), idsd)
        assert r.fetches == cd["fetches"]
        o.size = 20
        with pytest.raises(deepwell.InvalidArgument, match="size is 20"):
            dv.check(dv.lib.dw_vectors_search_with(index._handle(), q.ctypes.data, 60, ctypes.byref(o), 0,
                                                   ids.ctypes.data, dist.ctypes.data, None))


def test_on_the_gpu_the_same_answers_as_cpu_clients(data):
    """An index opened on the GPU answers CUDA tensors in place and NumPy queries alike, with the
    ids, distances and counts of CPU clients, bit for bit, under each page rule."""
    torch = pytest.importorskip("torch")
    if not (deepwell.cuda_available() and torch.cuda.is_available()):
        pytest.skip("needs a CUDA GPU")
    _, queries, path, _, _ = data
    with dv.open(path, device="cpu", cache_size="128KiB") as cpu, \
            dv.open(path, device="cuda", cache_size="128KiB") as gpu:
        assert gpu.info()["device"] == 0
        qt = torch.from_numpy(queries).cuda()
        for rule, sample in (("nearer", 1024), ("all", 1024), ("picked", 1024), ("nearer", 0), ("nearer", 100)):
            want = cpu.search(queries, k=10, list_size=64, pages=rule, entry_sample=sample, return_counts=True)
            ids, dist, c = gpu.search(qt, k=10, list_size=64, pages=rule, entry_sample=sample, return_counts=True)
            assert ids.is_cuda and dist.is_cuda and ids.dtype == torch.int64
            np.testing.assert_array_equal(ids.cpu().numpy(), want[0], err_msg=rule)
            np.testing.assert_array_equal(dist.cpu().numpy(), want[1], err_msg=rule)
            assert c == want[2], (rule, c, want[2])
            ids2, dist2, c2 = gpu.search(queries, k=10, list_size=64, pages=rule, entry_sample=sample, return_counts=True)
            assert isinstance(ids2, np.ndarray)
            np.testing.assert_array_equal(ids2, want[0], err_msg=rule)
            np.testing.assert_array_equal(dist2, want[1], err_msg=rule)
        with pytest.raises(deepwell.InvalidArgument, match="dimension"):
            gpu.search(qt[:, :5], k=10)
        with pytest.raises(deepwell.InvalidArgument, match="open it with device='cuda'"):
            cpu.search(qt, k=10)


def test_under_a_server_the_same_answers_by_the_datasets_name(data, tmp_path, deepwell_cli):
    """The index a server's dataset: opened by its name (no file of that name
    here), its header, codes and records all read over the link."""
    _, queries, path, _, _ = data
    sock = tmp_path / "dw.sock"
    (tmp_path / "ds.toml").write_text(server_config(sock, [dict(name="vecs", file=path)],
                                                    [dict(dataset="vecs", uid=os.getuid())]))

    with dv.open(path, device="cpu", cache_size="128KiB") as local:
        want = local.search(queries, k=10, list_size=64, return_counts=True)
    with serving(deepwell_cli, tmp_path / "ds.toml", sock):
        deepwell.connect(str(sock))
        try:
            with dv.open("vecs", device="cpu", cache_size="128KiB") as served:
                got = served.search(queries, k=10, list_size=64, return_counts=True)
        finally:
            deepwell.disconnect()
    np.testing.assert_array_equal(want[0], got[0])
    np.testing.assert_array_equal(want[1], got[1])
    assert want[2] == got[2]


def test_bad_input_is_refused_by_name(data, tmp_path):
    base, queries, path, _, _ = data
    with dv.open(path, device="cpu") as index:
        with pytest.raises(deepwell.InvalidArgument, match="dimension 24"):
            index.search(queries[:, :20], k=10)
        with pytest.raises(deepwell.InvalidArgument, match="larger than the index's 3000"):
            index.search(queries, k=3001, list_size=4000)
        with pytest.raises(deepwell.InvalidArgument, match="must be >= k"):
            index.search(queries, k=10, list_size=5)
        bad = queries.copy()
        bad[3, 4] = np.nan
        with pytest.raises(deepwell.InvalidArgument, match="NaN"):
            index.search(bad, k=10)
    with pytest.raises(deepwell.InvalidArgument, match="float32, float16 or uint8"):
        dv.build(base.astype(np.float64), tmp_path / "x.dwv")
    with pytest.raises(deepwell.InvalidArgument, match="2-D"):
        dv.build(base[0], tmp_path / "x.dwv")
    with pytest.raises(deepwell.InvalidArgument, match="metric"):
        dv.build(base, tmp_path / "x.dwv", metric="cosine")
    junk = tmp_path / "junk.dwv"
    junk.write_bytes(b"x" * 8192)
    with pytest.raises(deepwell.IOFailure, match="not a deepwell vector index"):
        dv.open(junk, device="cpu")
    damaged = tmp_path / "damaged.dwv"
    raw = bytearray(path.read_bytes())
    raw[40] ^= 0x44
    damaged.write_bytes(bytes(raw))
    with pytest.raises(deepwell.IOFailure, match="checksum"):
        dv.open(damaged, device="cpu")


def test_uint8_and_inner_product(tmp_path):
    rng = np.random.default_rng(9)
    base = rng.integers(0, 256, (1500, 32), dtype=np.uint8)
    dv.build(base, tmp_path / "u8.dwv", metric="ip", degree=16, list_size=32)
    with dv.open(tmp_path / "u8.dwv", device="cpu") as index:
        assert index.info()["type"] == "uint8" and index.info()["metric"] == "ip"
        q = base[:5].astype(np.float32)
        ids, dist = index.search(q, k=5, list_size=100)
        exact = -(q[:, None, :] * base[ids].astype(np.float32)).sum(-1)
        np.testing.assert_allclose(dist, exact, rtol=1e-5)
