"""Column files (docs/analytics.md): tables deepwell reads in place, a column at
a time, with predicates that fetch only the rows they select.

    import deepwell.table as dt
    t = dt.open("taxi.dwcol", device="cuda", cache_size="2GiB")
    far = t.where(t.column("trip_distance") >= 30)        # scans one column
    net = far.sum("total_amount") - far.sum("extra")       # reads those rows only
    per_mile = net / far.sum("trip_distance")

Decimal columns come back as exact values (``decimal.Decimal`` sums, or the
raw integers with ``raw=True``). ``convert(src, dst)`` writes a column file
from Parquet or CSV (pyarrow); ``to_parquet(src, dst)`` the other way
(pyarrow, else DuckDB), for comparisons with other engines.
"""
from __future__ import annotations

import ctypes
import decimal
import numbers
import os
import struct
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._lib import InvalidArgument, IOFailure
from .array import Array

__all__ = ["ColumnInfo", "Table", "Selection", "open", "read_layout", "write", "verify", "convert", "to_parquet"]

MAGIC = b"DWCOLS01"
VERSION = 2           # what write() writes: block sums (docs/analytics.md)
VERSIONS = (1, 2)     # what is read (version 1: no sums, read unchecked)
ALIGN = 4096
NAME_BYTES = 48
# magic, version, ncols, rows, row_group_rows, header_bytes, file_bytes, sums_offset, sums_crc, header_crc
_HEADER = struct.Struct("<8sIIQQQQQII")            # 64 bytes
_DESC = struct.Struct("<48sBBbBI QQQ16x")          # 96 bytes
assert _HEADER.size == 64 and _DESC.size == 96

# type code -> (name, numpy dtype)
TYPES = {1: ("int8", "<i1"), 2: ("int16", "<i2"), 3: ("int32", "<i4"), 4: ("int64", "<i8"), 5: ("uint8", "<u1"),
         6: ("uint16", "<u2"), 7: ("uint32", "<u4"), 8: ("uint64", "<u8"), 9: ("float32", "<f4"),
         10: ("float64", "<f8"), 11: ("decimal32", "<i4"), 12: ("decimal64", "<i8"), 13: ("timestamp_us", "<i8")}
_CODE = {name: code for code, (name, _) in TYPES.items()}


@dataclass
class ColumnInfo:
    name: str
    type: str
    scale: int
    offset: int
    bytes: int
    dtype: np.dtype


def read_layout(path) -> tuple[int, list[ColumnInfo]]:
    """(rows, columns) of a column file, checked as the C++ reader checks it."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    with builtins_open(path, "rb") as f:
        head = f.read(_HEADER.size)
        if len(head) < _HEADER.size:
            raise InvalidArgument(f"{path}: not a column file ({size} bytes, shorter than its header)")
        magic, version, ncols, rows, _rg, header_bytes, file_bytes, _so, _sc, _hc = _HEADER.unpack(head)
        if magic != MAGIC:
            raise InvalidArgument(f"{path}: not a column file (bad magic; deepwell column files start with DWCOLS01)")
        if version not in VERSIONS:
            raise InvalidArgument(f"{path}: column file version {version}, this library reads versions "
                                  f"{VERSIONS[0]} and {VERSIONS[1]} (a newer deepwell's file, or a corrupt header)")
        if version == 1 and (_so or _sc or _hc):
            raise IOFailure(f"{path}: the header says version 1 (no checksums) but holds version 2's checksum "
                            "fields: a corrupt column file")
        if file_bytes != size:
            raise InvalidArgument(f"{path}: header says the file has {file_bytes} bytes, it has {size} "
                                  "(truncated or appended to?)")
        cols = []
        raw = f.read(ncols * _DESC.size)
    for i in range(ncols):
        name, code, width, scale, _stats, _r, offset, nbytes, _so = _DESC.unpack_from(raw, i * _DESC.size)
        name = name.split(b"\0", 1)[0].decode()
        if code not in TYPES:
            raise InvalidArgument(f"{path}: column '{name}': unknown type code {code}")
        dt = np.dtype(TYPES[code][1])
        if nbytes != rows * dt.itemsize or offset + nbytes > size or offset % ALIGN:
            raise InvalidArgument(f"{path}: column '{name}': section [{offset}, {offset + nbytes}) does not fit "
                                  f"{rows} rows of {dt.itemsize} bytes in a {size}-byte file")
        cols.append(ColumnInfo(name, TYPES[code][0], scale, offset, nbytes, dt))
    return rows, cols


builtins_open = open  # noqa: A001 (this module's open() is the table's)

_bound = False


def _c():
    """The C library with the checksum functions bound (src/capi/table_api.cpp)."""
    global _bound
    from . import _lib
    if not _bound:
        P, u32, u64, i32, ptr = _lib.P, _lib.u32, _lib.u64, _lib.i32, _lib.ptr
        _lib.bind(_lib.lib, {
            "dw_crc32c": [u32, P, u64, ptr(u32)],
            "dw_section_sums": [P, u64, P],
            "dw_column_file_verify": [_lib.c_str, _lib.c_str, u32, ptr(i32)],
        }, "column-file checksums (src/capi/table_api.cpp)")
        _bound = True
    return _lib


def _crc32c(data: bytes, crc: int = 0) -> int:
    c = _c()
    out = ctypes.c_uint32()
    c.check(c.lib.dw_crc32c(crc, data, len(data), ctypes.byref(out)))
    return out.value


def _section_sums(arr: np.ndarray) -> np.ndarray:
    """The stored sums of a column's bytes: one a 4 KiB block (the last completed with zeros)."""
    c = _c()
    out = np.zeros(-(-arr.nbytes // ALIGN), np.uint32)
    c.check(c.lib.dw_section_sums(arr.ctypes.data, arr.nbytes, out.ctypes.data))
    return out


def verify(path, column: Optional[str] = None, threads: int = 0) -> bool:
    """Checks the column file's header, statistics and sums, and every block of
    ``column`` (every column when None) against its sum, in the C library (the
    C++ reader's own check). Raises ``IOFailure`` naming the file, the column
    and the bytes of the first bad block; False for a version-1 file (no sums)."""
    c = _c()
    checked = ctypes.c_int32(0)
    col = None if column is None else column.encode()
    c.check(c.lib.dw_column_file_verify(os.fsencode(path), col, threads, ctypes.byref(checked)))
    return bool(checked.value)


def write(path, columns: dict, types: Optional[dict] = None, scales: Optional[dict] = None,
          row_group_rows: int = 1 << 20) -> None:
    """Writes a column file from 1-D NumPy arrays of one length (no statistics).

    ``types``: column name -> type name where the array's dtype is not enough
    ("decimal32", "decimal64", "timestamp_us"); ``scales``: decimals' digits.
    """
    types, scales = types or {}, scales or {}
    if not columns:
        raise InvalidArgument(f"{path}: a column file needs at least one column")
    _check_write_args(path, columns, types, scales)
    columns = {name: np.asarray(v) for name, v in columns.items()}
    for name, v in columns.items():
        if v.ndim != 1:
            raise InvalidArgument(f"{path}: column '{name}' has shape {v.shape}: columns are 1-D arrays")
    rows = {len(v) for v in columns.values()}
    if len(rows) != 1:
        raise InvalidArgument(f"{path}: columns of different lengths {sorted(rows)}")
    rows = rows.pop()
    if rows == 0:
        raise InvalidArgument(f"{path}: the columns have no rows (a column file holds at least one)")
    descs, at = [], -(-(_HEADER.size + len(columns) * _DESC.size) // ALIGN) * ALIGN
    header_bytes = at
    # Version 2: the sums section after the columns, its CRC and the
    # header's (header and descriptors: write() keeps no statistics).
    for name, arr in columns.items():
        arr = np.ascontiguousarray(arr)
        tname = types.get(name) or next((t for t, dts in TYPES.values() if np.dtype(dts) == arr.dtype and t not in
                                         ("decimal32", "decimal64", "timestamp_us")), None)
        if tname not in _CODE:
            raise InvalidArgument(f"{path}: column '{name}': no column type for dtype {arr.dtype}")
        want = np.dtype(TYPES[_CODE[tname]][1])
        if len(name.encode()) >= NAME_BYTES or not name:
            raise InvalidArgument(f"{path}: column name '{name}' must be 1 to {NAME_BYTES - 1} bytes")
        _check_values_fit(path, name, tname, arr, want)
        descs.append((name, tname, arr.astype(want, copy=False), at))
        at = -(-(at + rows * want.itemsize) // ALIGN) * ALIGN
    sums_offset = at
    sums = np.concatenate([_section_sums(arr) for _, _, arr, _ in descs])
    file_bytes = -(-(sums_offset + sums.nbytes) // ALIGN) * ALIGN
    desc_bytes = b"".join(_DESC.pack(name.encode(), _CODE[tname], arr.dtype.itemsize, int(scales.get(name, 0)), 0, 0,
                                     off, rows * arr.dtype.itemsize, 0) for name, tname, arr, off in descs)
    sums_crc = _crc32c(sums.tobytes())
    head = _HEADER.pack(MAGIC, VERSION, len(descs), rows, 0, header_bytes, file_bytes, sums_offset, sums_crc, 0)
    header_crc = _crc32c(desc_bytes, _crc32c(head))
    # Written whole or not at all: a .partial file renamed over the path once synced.
    tmp = os.fspath(path) + ".partial"
    try:
        with builtins_open(tmp, "wb") as f:
            f.truncate(file_bytes)
            for name, tname, arr, off in descs:
                f.seek(off)
                arr.tofile(f)
            f.seek(sums_offset)
            sums.tofile(f)
            f.seek(0)
            f.write(_HEADER.pack(MAGIC, VERSION, len(descs), rows, 0, header_bytes, file_bytes, sums_offset,
                                 sums_crc, header_crc))
            f.write(desc_bytes)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_DECIMAL_DIGITS = {"decimal32": 9, "decimal64": 18}  # digits after the point the integer can hold


def _check_write_args(path, columns, types, scales) -> None:
    for name in columns:
        if not isinstance(name, str):
            raise InvalidArgument(f"{path}: column names are strings, not {name!r}")
    for name, t in types.items():
        if name not in columns:
            raise InvalidArgument(f"{path}: types names column '{name}', which is not among the columns")
        if t not in _CODE:
            raise InvalidArgument(f"{path}: column '{name}': type {t!r} is not one of {', '.join(_CODE)}")
    for name, scale in scales.items():
        if name not in columns:
            raise InvalidArgument(f"{path}: scales names column '{name}', which is not among the columns")
        t = types.get(name)
        if t not in _DECIMAL_DIGITS:
            raise InvalidArgument(f"{path}: column '{name}' has a scale but is not a decimal "
                                  f"(types={{'{name}': 'decimal32' or 'decimal64'}})")
        if not isinstance(scale, (int, np.integer)) or isinstance(scale, bool) or \
                not 0 <= scale <= _DECIMAL_DIGITS[t]:
            raise InvalidArgument(f"{path}: column '{name}': scale {scale!r} is not a whole number of digits "
                                  f"from 0 to {_DECIMAL_DIGITS[t]} ({t})")


def _check_values_fit(path, name, tname, arr: np.ndarray, want: np.dtype) -> None:
    """Values are stored as they are or refused: never cut (1.5 as 1) or wrapped (2**40 in 32 bits)."""
    if arr.dtype == want or arr.size == 0:
        return
    if want.kind in "iu" and arr.dtype.kind not in "iub":
        hint = " (decimals take the scaled integers: cents for scale 2)" if tname.startswith("decimal") else ""
        raise InvalidArgument(f"{path}: column '{name}': {arr.dtype} values for a {tname} column would be cut; "
                              f"convert them first{hint}")
    if want.kind in "iu" and arr.dtype.kind in "iu":
        lo, hi = np.iinfo(want).min, np.iinfo(want).max
        amin, amax = int(arr.min()), int(arr.max())
        if amin < lo or amax > hi:
            bad = amin if amin < lo else amax
            raise InvalidArgument(f"{path}: column '{name}': value {bad} does not fit a {tname} column "
                                  f"({lo} to {hi})")


class Table:
    """A column file opened for queries: columns are deepwell arrays (one
    dataset each) on ``device``, made as they are first used."""

    def __init__(self, path, *, device=None, cache_size=None, chunk_rows: int = 1 << 22, **array_kwargs):
        self.path = os.fspath(path)
        self.rows, cols = read_layout(self.path)
        self.columns = {c.name: c for c in cols}
        self._arrays: dict[str, Array] = {}
        self._kw = dict(array_kwargs, device=device, cache_size=cache_size)
        self.chunk_rows = int(chunk_rows)
        if self.chunk_rows < 1:  # a negative step would scan nothing and select no row
            raise InvalidArgument(f"chunk_rows must be at least 1, not {chunk_rows!r}")

    def info(self, name: str) -> ColumnInfo:
        if name not in self.columns:
            raise InvalidArgument(f"{self.path}: no column '{name}' (columns: {', '.join(self.columns)})")
        return self.columns[name]

    def array(self, name: str) -> Array:
        c = self.info(name)
        if name not in self._arrays:
            # The column's blocks checked once, before any of it is read (the
            # array reads the file's range through the controller unchecked).
            # A file rewritten in place after this is not caught.
            verify(self.path, name)
            self._arrays[name] = Array(self.path, dtype=c.dtype.name, shape=(self.rows,), offset=c.offset, **self._kw)
        return self._arrays[name]

    def column(self, name: str) -> "ColumnRef":
        self.info(name)
        return ColumnRef(self, name)

    def where(self, pred: "Predicate") -> "Selection":
        """The rows where ``pred`` holds: one scan of its column, in chunks."""
        if not isinstance(pred, Predicate):
            raise InvalidArgument(f"where() takes a comparison of a column, such as "
                                  f"t.column('trip_distance') >= 30, not {pred!r}")
        if pred.table is not self:
            raise InvalidArgument("the predicate is over another table's column")
        a = self.array(pred.name)
        raw = pred.raw_value(self.info(pred.name))
        picked = []
        for r0 in range(0, self.rows, self.chunk_rows):
            v = a[r0:min(self.rows, r0 + self.chunk_rows)]
            m = _compare(v, pred.op, raw)
            idx = m.nonzero()[0] if isinstance(m, np.ndarray) else m.nonzero().flatten()
            picked.append(idx + r0)
        return Selection(self, _concat(picked))

    def close(self) -> None:
        for a in self._arrays.values():
            a.close()
        self._arrays.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _compare(v, op, raw):
    return {">=": v >= raw, ">": v > raw, "<=": v <= raw, "<": v < raw, "==": v == raw, "!=": v != raw}[op]


def _concat(parts):
    if parts and not isinstance(parts[0], np.ndarray):
        torch = sys.modules["torch"]
        return torch.cat(parts)
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


@dataclass
class Predicate:
    table: Table
    name: str
    op: str
    value: object

    def raw_value(self, c: ColumnInfo):
        """The bound in the column's stored units (a decimal's integer)."""
        if c.type.startswith("decimal"):
            scaled = decimal.Decimal(str(self.value)) * (10 ** c.scale)
            if scaled != scaled.to_integral_value() and self.op in ("==", "!="):
                return None if self.op == "==" else None
            # x >= 29.995 on cents is x >= 3000 (ceil); x > b is x > floor(b); x <= b is x <= floor(b); x < b is x < ceil(b)
            up = int(scaled.to_integral_value(rounding=decimal.ROUND_CEILING))
            down = int(scaled.to_integral_value(rounding=decimal.ROUND_FLOOR))
            return {">=": up, ">": down, "<=": down, "<": up, "==": int(scaled), "!=": int(scaled)}[self.op]
        return self.value


class ColumnRef:
    """A column named in a predicate: ``t.column("trip_distance") >= 30``."""

    def __init__(self, table: Table, name: str):
        self.table, self.name = table, name

    def _p(self, op, v):
        # A bound that is not a number would fail deep in the scan (or, for
        # NaN, compare false everywhere): refused here, by name.
        is_number = not isinstance(v, bool) and isinstance(v, (numbers.Real, decimal.Decimal))
        if not is_number or (v.is_nan() if isinstance(v, decimal.Decimal) else v != v):
            raise InvalidArgument(f"{self.table.path}: column '{self.name}' {op} {v!r}: the bound must be a number")
        return Predicate(self.table, self.name, op, v)

    def __ge__(self, v):
        return self._p(">=", v)

    def __gt__(self, v):
        return self._p(">", v)

    def __le__(self, v):
        return self._p("<=", v)

    def __lt__(self, v):
        return self._p("<", v)

    def __eq__(self, v):  # noqa: D105
        return self._p("==", v)

    def __ne__(self, v):  # noqa: D105
        return self._p("!=", v)

    def sum(self, raw: bool = False):
        return Selection(self.table, None).sum(self.name, raw=raw)


class Selection:
    """Rows of a table (``indices``; None: every row)."""

    def __init__(self, table: Table, indices):
        self.table, self.indices = table, indices

    def __len__(self) -> int:
        return self.table.rows if self.indices is None else int(self.indices.shape[0])

    def values(self, name: str):
        """The column's stored values at the selected rows (gathered: only their pages are read)."""
        a = self.table.array(name)
        if self.indices is None:
            return a[0:self.table.rows]
        return a.gather(self.indices)

    def sum(self, name: str, raw: bool = False):
        """Exact for integer and decimal columns (a Decimal for decimals, unless raw)."""
        c = self.table.info(name)
        v = self.values(name)
        if c.dtype.kind == "f":
            s = float(v.sum()) if isinstance(v, np.ndarray) else float(v.double().sum().item())
            return s
        s = _exact_sum(v)
        if raw or not c.type.startswith("decimal"):
            return s
        return decimal.Decimal(s).scaleb(-c.scale)

    def mean(self, name: str):
        n = len(self)
        if n == 0:
            raise InvalidArgument("mean of no rows")
        s = self.sum(name)
        return s / n if isinstance(s, float) else s / decimal.Decimal(n)


def _exact_sum(v) -> int:
    """The sum of integers as a Python int: each value's high and low 32 bits summed apart (neither
    partial sum can wrap below 2^31 rows), where one 64-bit sum wrapped ([2^62, 2^62] gave -2^63)."""
    if isinstance(v, np.ndarray):
        if v.dtype == np.uint64:
            hi, lo = v >> np.uint64(32), v & np.uint64(0xFFFFFFFF)
            return int(hi.sum(dtype=np.uint64)) * 2**32 + int(lo.sum(dtype=np.uint64))
        w = v.astype(np.int64)
        return int((w >> 32).sum()) * 2**32 + int((w & 0xFFFFFFFF).sum())
    w = v.long()
    return int((w >> 32).sum().item()) * 2**32 + int((w & 0xFFFFFFFF).sum().item())


def open(path, **kwargs) -> Table:  # noqa: A001
    """A column file as a Table (``device``, ``cache_size`` and other deepwell.Array settings)."""
    return Table(path, **kwargs)


# ---- converters ----

def convert(src, dst, *, columns=None, batch_rows: int = 1 << 22) -> None:
    """A column file from Parquet (``*.parquet``) or CSV, with pyarrow.

    Integer columns keep their width; decimal128 columns of precision <= 9 become
    decimal32 (<= 18: decimal64); timestamps become microseconds; floats stay
    floats; strings of one byte (such as store_and_fwd_flag) become int8 codes.
    """
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover
        raise InvalidArgument("convert needs pyarrow (pip install pyarrow)") from e
    src = os.fspath(src)
    t = pq.read_table(src, columns=columns) if src.endswith(".parquet") else pcsv.read_csv(src)
    out, types, scales = {}, {}, {}
    for name in t.column_names:
        col = t.column(name).combine_chunks()
        typ = col.type
        if col.null_count:
            col = pc.fill_null(col, pa.scalar(0, typ) if not pa.types.is_string(typ) else "")
        if pa.types.is_decimal(typ):
            if typ.precision > 18:
                raise InvalidArgument(f"{src}: column '{name}': decimal({typ.precision},{typ.scale}) is wider than 18 digits")
            # The unscaled integers: the low 64 bits of each 128-bit value (precision <= 18 fits).
            if typ.bit_width != 128:
                col = col.cast(pa.decimal128(typ.precision, typ.scale))
            words = np.frombuffer(col.buffers()[1], dtype="<i8")[2 * col.offset:2 * (col.offset + len(col))]
            out[name] = words[0::2].astype(np.int32 if typ.precision <= 9 else np.int64)
            types[name] = "decimal32" if typ.precision <= 9 else "decimal64"
            scales[name] = typ.scale
        elif pa.types.is_timestamp(typ):
            out[name] = pc.cast(col, pa.timestamp("us")).cast(pa.int64()).to_numpy()
            types[name] = "timestamp_us"
        elif pa.types.is_string(typ) or pa.types.is_large_string(typ):
            out[name] = np.array([ord(s[0]) if s else 0 for s in col.to_pylist()], dtype=np.int8)
        elif pa.types.is_boolean(typ):
            out[name] = col.to_numpy(zero_copy_only=False).astype(np.int8)
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    write(dst, out, types, scales)


def to_parquet(src, dst, *, row_group_rows: int = 1 << 20, engine: Optional[str] = None) -> None:
    """The column file as Parquet (decimals as DECIMAL(9|18, scale), timestamps as TIMESTAMP),
    written by pyarrow or DuckDB (``engine``; default: pyarrow where it is installed)."""
    rows, cols = read_layout(src)
    verify(src)  # the memmaps below read the file's bytes unchecked
    mm = {c.name: np.memmap(src, dtype=c.dtype, mode="r", offset=c.offset, shape=(rows,)) for c in cols}
    try:
        if engine == "duckdb":
            raise ImportError
        import pyarrow as pa
        import pyarrow.parquet as pq
        fields = []
        for c in cols:
            if c.type.startswith("decimal"):
                fields.append(pa.field(c.name, pa.decimal128(9 if c.type == "decimal32" else 18, c.scale)))
            elif c.type == "timestamp_us":
                fields.append(pa.field(c.name, pa.timestamp("us")))
            else:
                fields.append(pa.field(c.name, pa.from_numpy_dtype(c.dtype)))
        schema = pa.schema(fields)
        with pq.ParquetWriter(os.fspath(dst), schema) as w:
            for r0 in range(0, rows, row_group_rows):
                r1 = min(rows, r0 + row_group_rows)
                arrays = []
                for c, f in zip(cols, fields):
                    v = np.asarray(mm[c.name][r0:r1])
                    if c.type.startswith("decimal"):
                        # decimal128's layout: 16-byte little-endian integers, unscaled.
                        wide = np.empty((r1 - r0, 2), dtype="<i8")
                        wide[:, 0] = v
                        wide[:, 1] = np.where(v < 0, -1, 0)
                        arrays.append(pa.Array.from_buffers(f.type, r1 - r0, [None, pa.py_buffer(wide)]))
                    elif c.type == "timestamp_us":
                        arrays.append(pa.array(v, pa.int64()).cast(f.type))
                    else:
                        arrays.append(pa.array(v))
                w.write_table(pa.Table.from_arrays(arrays, schema=schema), row_group_size=row_group_rows)
        return
    except ImportError:
        pass
    import duckdb  # the numpy arrays by name (DuckDB's replacement scan), written by DuckDB
    exprs = []
    for c in cols:
        if c.type.startswith("decimal"):
            p = 9 if c.type == "decimal32" else 18
            exprs.append(f'CAST("{c.name}"::DECIMAL(18,0) * 0.{"0" * (c.scale - 1)}1 AS DECIMAL({p},{c.scale})) AS "{c.name}"'
                         if c.scale > 0 else f'"{c.name}"::DECIMAL({p},0) AS "{c.name}"')
        elif c.type == "timestamp_us":
            exprs.append(f'make_timestamp("{c.name}") AS "{c.name}"')
        else:
            exprs.append(f'"{c.name}"')
    con = duckdb.connect()
    dw_columns = {k: np.asarray(v) for k, v in mm.items()}  # noqa: F841 (found by name)
    con.execute(f"COPY (SELECT {', '.join(exprs)} FROM dw_columns) TO '{os.fspath(dst)}' "
                f"(FORMAT PARQUET, ROW_GROUP_SIZE {row_group_rows})")
