"""The package on a GPU with PyTorch (and CuPy, PyG where installed): every
gather compared byte for byte with the file read through numpy.memmap."""
import threading

import numpy as np
import pytest

import deepwell

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not (deepwell.cuda_available() and torch.cuda.is_available()),
                                reason="needs a CUDA GPU")

ROWS, RB = 16384, 4096  # 64 MiB of 4 KiB rows


@pytest.fixture(scope="module")
def feature_file(tmp_path_factory):
    from conftest import pattern
    data = pattern(ROWS, RB, seed=11)
    path = str(tmp_path_factory.mktemp("gpu") / "feats.bin")
    data.tofile(path)
    return path, torch.from_numpy(data)


def same(x, y):
    """Byte-for-byte equality (random bytes as floats hold NaNs, which torch.equal calls unequal)."""
    return torch.equal(x.cpu().contiguous().view(torch.uint8), y.cpu().contiguous().view(torch.uint8))


def gpu_ids(n, seed, rows=ROWS):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, rows, (n,), device="cuda", generator=g)


@pytest.mark.parametrize("direct,cache_reads", [("resident", True), ("never", True), ("resident", False)])
@pytest.mark.parametrize("page", [4096, 65536])
def test_gather_equals_memmap_under_eviction(feature_file, direct, cache_reads, page):
    path, data = feature_file
    from deepwell.baselines import MemmapLoader
    mm = MemmapLoader(path, np.uint8, (ROWS, RB))
    with deepwell.open(path, dtype="uint8", shape=(-1, RB), cache_size="16MiB", page_size=page,
                       direct=direct, cache_reads=cache_reads) as a:
        assert a.on_gpu and a.direct_tier == (direct == "resident")
        assert a.in_place == (not cache_reads)
        for seed in range(4):
            ids = gpu_ids(20000, seed)
            got = a.gather(ids)
            assert got.is_cuda and got.shape == (20000, RB) and got.dtype == torch.uint8
            assert torch.equal(got, mm.gather(ids))
        ids32 = gpu_ids(5000, 9).to(torch.int32)
        assert torch.equal(a.gather(ids32).cpu(), data[ids32.long().cpu()])
        st = a.stats()
        if not cache_reads:
            assert st["accesses"] == 0
            return
        assert st["misses"] > 0 and st["evictions"] > 0
        if direct == "never":
            assert st["controller_reads"] > 0


@pytest.mark.parametrize("row_bytes", [256, 12288, 3000])
@pytest.mark.parametrize("mode", ["controller", "in_place"])
def test_other_row_shapes(tmp_path, row_bytes, mode):
    from conftest import pattern
    rows = 5000
    data = pattern(rows, row_bytes, seed=row_bytes)
    path = str(tmp_path / "rows.bin")
    data.tofile(path)
    kw = {"direct": "never"} if mode == "controller" else {"cache_reads": False}
    with deepwell.open(path, dtype="uint8", shape=(-1, row_bytes), cache_size="8MiB", **kw) as a:
        ids = gpu_ids(7000, 1, rows)
        assert torch.equal(a.gather(ids).cpu(), torch.from_numpy(data)[ids.cpu()])
        with pytest.raises(IndexError):
            a.gather(torch.tensor([rows], device="cuda"))


def test_typed_host_indices_streams_and_out(feature_file):
    path, data = feature_file
    f32 = data.view(torch.float32)  # ROWS x 1024
    with deepwell.open(path, dtype=torch.float32, shape=(-1, 1024), cache_size="32MiB") as a:
        host = np.array([5, 0, ROWS - 1, 5])
        assert same(a.gather(host), f32[host])               # numpy index: copied on the stream
        assert same(a.gather(torch.tensor(host)), f32[host])  # torch CPU index
        s = torch.cuda.Stream()
        out = torch.empty(4, 1024, device="cuda")
        with torch.cuda.stream(s):
            ids = torch.tensor(host, device="cuda")
            r = a.gather(ids, out=out, check=False)
        assert r is out
        a.check(s)
        assert same(out, f32[host])
        assert same(a[3:7], f32[3:7])
        assert same(a[ROWS - 1], f32[ROWS - 1])
    with deepwell.open(path, dtype="bfloat16", shape=(-1, 2048)) as b:
        got = b.gather(torch.tensor([1, 2], device="cuda"))
        assert got.dtype == torch.bfloat16
        assert torch.equal(got.view(torch.uint8).cpu(), data[1:3])


def test_threads_on_their_own_streams(feature_file):
    path, data = feature_file
    bad = []
    with deepwell.open(path, dtype="uint8", shape=(-1, RB), cache_size="16MiB") as a:
        def worker(seed):
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for k in range(5):
                    ids = gpu_ids(3000, 100 * seed + k)
                    got = a.gather(ids)
                    if not torch.equal(got.cpu(), data[ids.cpu()]):
                        bad.append(seed)
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        [t.start() for t in ts]
        [t.join(timeout=120) for t in ts]
        assert not any(t.is_alive() for t in ts)
    assert not bad


def test_scatter_flush_and_reopen(tmp_path):
    path = str(tmp_path / "w.f32")
    n, d = 4096, 256
    with deepwell.open(path, dtype="float32", shape=(n, d), create=True, cache_size="2MiB") as a:
        ids = torch.randperm(n, device="cuda")[:3000]
        src = torch.randn(3000, d, device="cuda")
        a.scatter(ids, src)
        assert torch.equal(a.gather(ids), src)
        a.flush()
    got = torch.from_numpy(np.fromfile(path, np.float32)[: n * d].reshape(n, d))
    assert torch.equal(got[ids.cpu()], src.cpu())
    untouched = torch.ones(n, dtype=torch.bool)
    untouched[ids.cpu()] = False
    assert (got[untouched] == 0).all()


def test_gpu_errors(feature_file):
    path, _ = feature_file
    with deepwell.open(path, dtype="uint8", shape=(-1, RB), cache_size="16MiB") as a:
        with pytest.raises(IndexError, match=f"index {ROWS + 3} is out of range for {ROWS} rows"):
            a.gather(torch.tensor([1, ROWS + 3], device="cuda"))
        with pytest.raises(IndexError, match="index -2"):
            a.gather(torch.tensor([-2], device="cuda"))
        with pytest.raises(ValueError, match="host memory"):
            a.gather(torch.tensor([1], device="cuda"), out=torch.empty(1, RB, dtype=torch.uint8))
        with pytest.raises(ValueError, match="int32 or int64"):
            a.gather(torch.tensor([1.0], device="cuda"))
        with pytest.raises(ValueError, match="read-only"):
            a.scatter(torch.tensor([1], device="cuda"), torch.zeros(1, RB, dtype=torch.uint8, device="cuda"))
        # unchecked errors surface at the next check
        a.gather(torch.tensor([ROWS], device="cuda"), check=False)
        with pytest.raises(IndexError):
            a.check()
        a.check()  # reported once
        assert a.gather(torch.tensor([0], device="cuda")).shape == (1, RB)
    with pytest.raises(ValueError, match="too small|pages"):
        with deepwell.open(path, dtype="uint8", shape=(-1, RB), cache_size="256KiB") as tiny:
            tiny.gather(gpu_ids(10, 0))


def test_cupy_and_dlpack(feature_file):
    path, data = feature_file
    cupy = pytest.importorskip("cupy")
    with deepwell.open(path, dtype="uint8", shape=(-1, RB)) as a:
        ids = cupy.asarray([3, 1, 4, 1, 5])
        got = a.gather(ids)
        assert isinstance(got, cupy.ndarray)
        assert np.array_equal(cupy.asnumpy(got), data[[3, 1, 4, 1, 5]].numpy())

        class OnlyDlpack:  # any DLPack producer (JAX arrays, ...)
            def __init__(self, t):
                self.t = t

            def __dlpack__(self, stream=None):
                return self.t.__dlpack__()

            def __dlpack_device__(self):
                return self.t.__dlpack_device__()
        t = torch.tensor([7, 8], device="cuda")
        assert torch.equal(a.gather(OnlyDlpack(t)).cpu(), data[[7, 8]])


def test_feature_store_and_loader_match_memmap(feature_file):
    path, data = feature_file
    from deepwell.baselines import MemmapLoader
    from deepwell.gnn import FeatureLoader
    mm = MemmapLoader(path, np.float32, (ROWS, 1024))
    with deepwell.open(path, dtype="float32", shape=(-1, 1024), cache_size="16MiB") as a:
        loader = FeatureLoader(a)
        batches = [gpu_ids(n, n) for n in (100, 2000, 777)]
        for ids, got in zip(batches, loader.load_many(batches)):
            assert same(got, mm.gather(ids))
        gnn = pytest.importorskip("deepwell.gnn")
        if getattr(gnn, "DeepwellFeatureStore", None) is None:
            pytest.skip("torch_geometric is not installed")
        store = gnn.DeepwellFeatureStore()
        store.add(a, group_name=None, attr_name="x")
        ids = gpu_ids(500, 3)
        assert same(store.get_tensor(group_name=None, attr_name="x", index=ids), mm.gather(ids))
        assert tuple(store.get_tensor_size(group_name=None, attr_name="x")) == (ROWS, 1024)
        assert len(store.get_all_tensor_attrs()) == 1


def test_neighbor_sampler_gives_real_edges():
    from deepwell.sampler import NeighborSampler
    g = torch.Generator(device="cuda").manual_seed(0)
    n, m = 5000, 60000
    src = torch.randint(0, n, (m,), device="cuda", generator=g)
    dst = torch.randint(0, n, (m,), device="cuda", generator=g)
    order = torch.argsort(src)
    col = dst[order]
    rowptr = torch.zeros(n + 1, dtype=torch.int64, device="cuda")
    rowptr[1:] = torch.cumsum(torch.bincount(src, minlength=n), 0)
    sampler = NeighborSampler(rowptr, col, [10, 5], generator=g)
    seeds = torch.randperm(n, device="cuda", generator=g)[:256]
    sub = sampler.sample(seeds)
    assert torch.equal(sub.n_id[:256], seeds)
    assert sub.n_id.unique().numel() == sub.n_id.numel()
    edges = set(zip(src.tolist(), dst.tolist()))
    gsrc, gdst = sub.n_id[sub.edge_index[0]].tolist(), sub.n_id[sub.edge_index[1]].tolist()
    assert all((t, s) in edges for s, t in zip(gsrc, gdst))  # neighbour s of target t: edge t -> s
    per_target = torch.bincount(sub.edge_index[1][: sub.edge_index.shape[1]], minlength=sub.n_id.numel())
    assert int(per_target[:256].max()) <= 10


def test_jax_indices_in_and_out_without_copies(feature_file):
    path, data = feature_file
    import os
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave GPU memory to the others
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX has no GPU backend here")
    ids = jax.device_put(jax.numpy.array([3, 9, 4], dtype=jax.numpy.int32), gpu)
    with deepwell.open(path, dtype="uint8", shape=(-1, RB)) as a:
        got = a.gather(ids)  # a torch tensor (deepwell allocates outputs with torch or CuPy)
        assert torch.equal(got.cpu(), data[[3, 9, 4]])
        back = jax.dlpack.from_dlpack(got)  # into JAX without a copy
        assert back.shape == (3, RB) and int(back[1, 0]) == int(data[9, 0])


def test_hot_row_buffer_serves_its_rows_from_host_memory(feature_file):
    path, data = feature_file
    from deepwell.gnn import FeatureLoader
    with deepwell.open(path, dtype="uint8", shape=(-1, RB), cache_size="16MiB", direct="never") as a:
        hot = torch.arange(0, ROWS, 7, device="cuda")  # every 7th row in the pinned host buffer
        loader = FeatureLoader(a, hot_rows=hot)
        assert loader.hot.direct_tier and loader.hot.in_place
        a.reset_stats()
        for seed in range(3):
            ids = gpu_ids(9000, 50 + seed)
            assert torch.equal(loader.load(ids).cpu(), data[ids.cpu()])
        assert abs(loader.hot_hits / loader.loaded - 1 / 7) < 0.02
        assert a.stats()["accesses"] < loader.loaded  # the hot rows did not go through the array
        with pytest.raises(IndexError):
            loader.load(torch.tensor([ROWS], device="cuda"))
        loader.close()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_each_with_its_array(feature_file):
    path, data = feature_file
    arrays = [deepwell.open(path, dtype="uint8", shape=(-1, RB), cache_size="16MiB", device=f"cuda:{d}")
              for d in (0, 1)]
    bad = []

    def worker(d):
        with torch.cuda.device(d):
            g = torch.Generator(device=f"cuda:{d}").manual_seed(d)
            for _ in range(5):
                ids = torch.randint(0, ROWS, (5000,), device=f"cuda:{d}", generator=g)
                got = arrays[d].gather(ids)
                if got.device.index != d or not torch.equal(got.cpu(), data[ids.cpu()]):
                    bad.append(d)
    ts = [threading.Thread(target=worker, args=(d,)) for d in (0, 1)]
    [t.start() for t in ts]
    [t.join(timeout=120) for t in ts]
    assert not any(t.is_alive() for t in ts) and not bad
    with pytest.raises(ValueError, match="device 1, but the array is on device 0"):
        arrays[0].gather(torch.tensor([1], device="cuda:1"))
    for a in arrays:
        a.close()


def test_a_program_that_never_closes_exits_cleanly(feature_file):
    import subprocess
    import sys
    path, _ = feature_file
    code = (f"import deepwell, torch\n"
            f"a = deepwell.open({path!r}, dtype='uint8', shape=(-1, {RB}))\n"
            f"x = a[torch.arange(100, device='cuda')]\n"
            f"b = deepwell.open(None, dtype='float32', shape=(1000, 64))\n"
            f"b[torch.arange(10, device='cuda')] = torch.ones(10, 64, device='cuda')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "closing" not in r.stderr


@pytest.mark.parametrize("cache_reads", [True, False])
def test_gathers_see_scattered_rows_on_the_gpu(cache_reads):
    # A writable host-memory array: in-place reads would miss dirty rows.
    with deepwell.open(None, dtype="uint8", shape=(64, 256), cache_reads=cache_reads) as a:
        assert a.in_place == (not cache_reads)
        rows = torch.full((1, 256), 0xAB, dtype=torch.uint8, device="cuda")
        a.scatter(torch.tensor([5], device="cuda"), rows)
        assert torch.equal(a.gather(torch.tensor([5], device="cuda")), rows)
        a.flush()
        assert torch.equal(a.gather(torch.tensor([5], device="cuda")), rows)


def test_arrays_on_one_file_share_its_cache_on_the_gpu(tmp_path):
    # Two arrays on the same file and settings share one GPU cache: rows
    # scattered through one are gathered through the other before a flush.
    path = str(tmp_path / "shared.bin")
    data = np.arange(256 * 1024, dtype=np.uint32).view(np.uint8).reshape(1024, 1024)
    data.tofile(path)
    with deepwell.open(path, dtype="uint8", shape=(-1, 1024), writable=True) as w, \
            deepwell.open(path, dtype="uint8", shape=(-1, 1024)) as r:
        ids = torch.tensor([3, 700], device="cuda")
        assert same(r.gather(ids), torch.from_numpy(data[[3, 700]]))
        rows = torch.full((2, 1024), 0x7E, dtype=torch.uint8, device="cuda")
        w.scatter(ids, rows)
        assert torch.equal(r.gather(ids), rows)
    got = np.fromfile(path, np.uint8).reshape(1024, 1024)
    assert (got[[3, 700]] == 0x7E).all() and np.array_equal(got[4], data[4])
