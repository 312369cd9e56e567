"""deepwell.table with CPU clients: column files written and read back, the
query API's exact answers against NumPy and DuckDB, Parquet round trips,
and errors that name the file and the column."""
import decimal
import os

import numpy as np
import pytest

import deepwell
import deepwell.table as dt

COLS = ["total_amount", "extra", "improvement_surcharge", "tolls_amount", "mta_tax"]


def taxi_like(rows: int, seed: int = 5) -> dict:
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 3000, rows).astype(np.int32)
    far = rng.random(rows) < 0.01
    d[far] = rng.integers(3000, 15000, far.sum())
    out = {"trip_distance": d}
    for c in COLS:
        out[c] = rng.integers(0, 20000, rows).astype(np.int32)
    out["tpep_pickup_datetime"] = (1546300800 + rng.integers(0, 86400 * 365, rows)) * 1_000_000
    out["payment_type"] = rng.integers(1, 5, rows).astype(np.int8)
    return out


def write_taxi_like(path, rows: int):
    cols = taxi_like(rows)
    types = {c: "decimal32" for c in ["trip_distance"] + COLS}
    types["tpep_pickup_datetime"] = "timestamp_us"
    dt.write(path, cols, types=types, scales={c: 2 for c in types if c.startswith(("trip", *COLS))})
    return cols


def test_layout_round_trip(tmp_path):
    path = tmp_path / "t.dwcol"
    cols = write_taxi_like(path, 5000)
    rows, info = dt.read_layout(path)
    assert rows == 5000
    assert [c.name for c in info] == list(cols)
    by = {c.name: c for c in info}
    assert by["trip_distance"].type == "decimal32" and by["trip_distance"].scale == 2
    assert by["tpep_pickup_datetime"].type == "timestamp_us"
    assert all(c.offset % 4096 == 0 for c in info)
    for name, want in cols.items():
        got = np.fromfile(path, dtype=by[name].dtype, count=rows, offset=by[name].offset)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("chunk", [1 << 22, 777])
def test_queries_are_exact(tmp_path, chunk):
    path = tmp_path / "q.dwcol"
    cols = write_taxi_like(path, 20000)
    sel = cols["trip_distance"] >= 3000
    with dt.open(path, device="cpu", cache_size="1MiB", chunk_rows=chunk) as t:
        far = t.where(t.column("trip_distance") >= 30)
        assert len(far) == int(sel.sum()) > 0
        np.testing.assert_array_equal(np.sort(np.asarray(far.indices)), np.nonzero(sel)[0])
        for c in COLS:
            assert far.sum(c, raw=True) == int(cols[c][sel].astype(np.int64).sum())
            assert far.sum(c) == decimal.Decimal(int(cols[c][sel].astype(np.int64).sum())).scaleb(-2)
        assert far.mean("trip_distance") == far.sum("trip_distance") / len(far)
        # A bound between two cents: >= 29.995 is >= 30.00 on cents; > 29.995 too; < 30.001 is <= 30.00.
        assert len(t.where(t.column("trip_distance") >= 29.995)) == len(far)
        assert len(t.where(t.column("trip_distance") < 30.001)) == int((cols["trip_distance"] <= 3000).sum())


def test_errors_name_the_file_and_column(tmp_path):
    path = tmp_path / "e.dwcol"
    write_taxi_like(path, 100)
    with dt.open(path, device="cpu") as t:
        with pytest.raises(deepwell.InvalidArgument, match=r"e\.dwcol: no column 'fare'.*trip_distance"):
            t.column("fare")
        # Bounds that are not numbers, and a where() of something else.
        d = t.column("trip_distance")
        for bad in ("30", None, float("nan"), decimal.Decimal("NaN"), decimal.Decimal("sNaN"), True):
            with pytest.raises(deepwell.InvalidArgument, match=r"e\.dwcol: column 'trip_distance' >= .*must be a number"):
                t.where(d >= bad)
        with pytest.raises(deepwell.InvalidArgument, match=r"where\(\) takes a comparison of a column"):
            t.where(True)
    # A scan in chunks of no rows (or a negative number) would select nothing.
    for chunk in (0, -5):
        with pytest.raises(deepwell.InvalidArgument, match="chunk_rows must be at least 1"):
            dt.open(path, device="cpu", chunk_rows=chunk)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 4096)
    with pytest.raises(deepwell.InvalidArgument, match=r"e\.dwcol: header says the file has .* \(truncated"):
        dt.open(path, device="cpu")
    bad = tmp_path / "not.dwcol"
    bad.write_bytes(b"x" * 8192)
    with pytest.raises(deepwell.InvalidArgument, match="not a column file"):
        dt.read_layout(bad)


def test_a_flipped_byte_is_an_error_not_data(tmp_path):
    """Version 2's block sums: a flipped value fails the column's check (before
    any of it is read), naming the file, the column and the bytes; the other
    columns still read; header damage fails the open."""
    path = tmp_path / "c.dwcol"
    cols = write_taxi_like(path, 5000)
    assert dt.verify(path) is True
    by = {c.name: c for c in dt.read_layout(path)[1]}
    at = by["extra"].offset + 4 * 1234 + 1
    good = path.read_bytes()
    bad = bytearray(good)
    bad[at] ^= 0x10
    path.write_bytes(bytes(bad))
    start = at // 4096 * 4096
    with dt.open(path, device="cpu") as t:
        with pytest.raises(deepwell.IOFailure, match=rf"c\.dwcol: column 'extra': bytes \[{start}, {start + 4096}\)"):
            t.array("extra")
        far = t.where(t.column("trip_distance") >= 30)
        assert far.sum("total_amount", raw=True) == int(cols["total_amount"][cols["trip_distance"] >= 3000].sum())
    with pytest.raises(deepwell.IOFailure, match="column 'extra'"):
        dt.verify(path)
    bad = bytearray(good)
    bad[64 + 96 + 60] ^= 1  # the second column's section offset
    path.write_bytes(bytes(bad))
    with pytest.raises(deepwell.Error, match=r"c\.dwcol"):
        dt.open(path, device="cpu").array("trip_distance")


def test_version_1_files_still_read(tmp_path):
    path = tmp_path / "v1.dwcol"
    cols = write_taxi_like(path, 3000)
    img = bytearray(path.read_bytes())
    head = list(dt._HEADER.unpack_from(img))
    sums_offset = head[7]
    head[1], head[6], head[7], head[8], head[9] = 1, sums_offset, 0, 0, 0   # version 1 ends at its last column
    dt._HEADER.pack_into(img, 0, *head)
    path.write_bytes(bytes(img[:sums_offset]))
    assert dt.verify(path) is False
    with dt.open(path, device="cpu") as t:
        assert len(t.where(t.column("trip_distance") >= 30)) == int((cols["trip_distance"] >= 3000).sum())


def test_a_version_word_damaged_to_1_is_not_an_unchecked_file(tmp_path):
    path = tmp_path / "v2.dwcol"
    write_taxi_like(path, 3000)
    img = bytearray(path.read_bytes())
    head = list(dt._HEADER.unpack_from(img))
    head[1] = 1  # the version word only: the checksum fields stay
    dt._HEADER.pack_into(img, 0, *head)
    path.write_bytes(bytes(img))
    with pytest.raises(deepwell.Error, match="says version 1 .* version 2's checksum fields"):
        dt.open(path, device="cpu")


@pytest.mark.parametrize("engine", ["pyarrow", "duckdb"])
def test_parquet_round_trip_and_duckdb_agrees(tmp_path, engine):
    if engine == "pyarrow":
        pytest.importorskip("pyarrow")
    duckdb = pytest.importorskip("duckdb")
    src = tmp_path / "a.dwcol"
    cols = write_taxi_like(src, 30000)
    pq = tmp_path / "a.parquet"
    dt.to_parquet(src, pq, engine=engine, row_group_rows=4096)
    con = duckdb.connect()
    types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM '{pq}'").fetchall()}
    assert types["trip_distance"] == "DECIMAL(9,2)" and types["tpep_pickup_datetime"].startswith("TIMESTAMP")
    net = " - ".join(COLS)
    n, dist, total = con.execute(f"SELECT count(*), sum(trip_distance), sum({net}) FROM '{pq}' "
                                "WHERE trip_distance >= 30").fetchone()
    sel = cols["trip_distance"] >= 3000
    want = cols[COLS[0]][sel].astype(np.int64).sum() - sum(cols[c][sel].astype(np.int64).sum() for c in COLS[1:])
    assert n == int(sel.sum())
    assert int(dist * 100) == int(cols["trip_distance"][sel].astype(np.int64).sum())
    assert int(total * 100) == int(want)
    with dt.open(src, device="cpu") as t:
        far = t.where(t.column("trip_distance") >= 30)
        mine = far.sum(COLS[0]) - sum(far.sum(c) for c in COLS[1:])
        assert mine == total  # to the cent: both exact decimals
    if engine == "pyarrow":  # and back: the same bytes
        back = tmp_path / "b.dwcol"
        dt.convert(pq, back)
        assert back.read_bytes() == src.read_bytes()


def _gpu_ok() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return deepwell.cuda_available() and torch.cuda.is_available()


@pytest.mark.skipif(not _gpu_ok(), reason="needs a CUDA GPU and PyTorch")
@pytest.mark.parametrize("cache", ["2MiB", None])
def test_queries_on_the_gpu_are_exact(tmp_path, cache):
    # The same queries with device="cuda": the scan's chunks and the gathers
    # come back as CUDA tensors; through a 2 MiB cache the columns (about
    # 0.8 MiB each) evict one another.
    path = tmp_path / "g.dwcol"
    cols = write_taxi_like(path, 200_000)
    sel = cols["trip_distance"] >= 3000
    kw = {"cache_size": cache} if cache else {}
    with dt.open(path, device="cuda", chunk_rows=50_000, **kw) as t:
        far = t.where(t.column("trip_distance") >= 30)
        assert far.indices.is_cuda
        assert len(far) == int(sel.sum()) > 0
        np.testing.assert_array_equal(np.sort(far.indices.cpu().numpy()), np.nonzero(sel)[0])
        for c in COLS:
            assert far.sum(c, raw=True) == int(cols[c][sel].astype(np.int64).sum())
        assert far.mean("trip_distance") == far.sum("trip_distance") / len(far)
        every = t.column("total_amount").sum(raw=True)
        assert every == int(cols["total_amount"].astype(np.int64).sum())


def test_taxi_bench_with_cpu_clients_agrees_with_duckdb(tmp_path, deepwell_cli):
    """bench/probes/taxi-bench end to end on a small table (CPU clients): its
    generator, deepwell's queries checked against a plain scan, the Parquet
    copy, DuckDB warm and cold, and deepwell cold where this machine lets it
    drop the page cache; the script fails on any disagreement."""
    pytest.importorskip("duckdb")
    import json
    import pathlib
    import subprocess
    import sys
    repo = pathlib.Path(__file__).resolve().parents[2]
    build = pathlib.Path(deepwell_cli).resolve().parents[1]
    p = subprocess.run([sys.executable, str(repo / "bench" / "probes" / "taxi-bench"), "--build", str(build), "--cpu",
                        "--rows", "300000", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
                        "--commit", "test", "--cold-seconds", "60"],
                       capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads((tmp_path / "out" / "taxi.json").read_text())
    assert res["deepwell_check"] == {f"q{q}": "equal" for q in range(6)}
    assert res["duckdb_agrees"] == {f"q{q}": True for q in range(6)}
    cold = [r for r in res["runs"] if r["method"].startswith("deepwell-cold")]
    assert all(r["agrees"] for r in cold)
    if not any("cannot drop the page cache" in n for n in res["notes"]):
        assert len(cold) == 12, res["notes"]


def test_integer_sums_are_exact_past_64_bits(tmp_path):
    # One 64-bit sum wrapped: [2^63+5, 2^63+7] summed to 12, [2^62, 2^62] to -2^63.
    path = tmp_path / "big.dwcol"
    dt.write(path, {"u": np.array([2**63 + 5, 2**63 + 7], dtype=np.uint64),
                    "i": np.array([2**62, 2**62], dtype=np.int64),
                    "n": np.array([-2**63, -1], dtype=np.int64)})
    t = dt.open(path, device="cpu")
    assert t.column("u").sum() == 2**64 + 12
    assert t.column("i").sum() == 2**63
    assert t.column("n").sum() == -2**63 - 1
    assert t.where(t.column("u") >= 0).sum("u") == 2**64 + 12


@pytest.mark.parametrize("columns,types,scales,match", [
    ({"a": np.zeros((10, 2), np.int32)}, None, None, "1-D"),
    ({"a": np.zeros(0, np.int32)}, None, None, "no rows"),
    ({"a": np.zeros(5, np.int32)}, {"a": "decimal32"}, {"a": -3}, "from 0 to 9"),
    ({"a": np.zeros(5, np.int64)}, {"a": "decimal64"}, {"a": 300}, "from 0 to 18"),
    ({"a": np.zeros(5, np.int32)}, {"a": "decimal32"}, {"a": "x"}, "whole number of digits"),
    ({"a": np.zeros(5, np.int32)}, None, {"a": 2}, "not a decimal"),
    ({"a": np.array([1.5, 2.5])}, {"a": "int32"}, None, "would be cut"),
    ({"a": np.array([2**40])}, {"a": "decimal32"}, {"a": 2}, "does not fit"),
    ({"a": np.zeros(3, np.int32)}, {"a": "varchar"}, None, "'varchar' is not one of"),
    ({1: np.zeros(3, np.int32)}, None, None, "column names are strings"),
])
def test_write_refuses_what_it_would_store_wrong(tmp_path, columns, types, scales, match):
    path = tmp_path / "bad.dwcol"
    with pytest.raises(deepwell.InvalidArgument, match=match):
        dt.write(path, columns, types=types, scales=scales)
    assert not path.exists()
