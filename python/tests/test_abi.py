"""The ctypes structures of the package against include/deepwell/c/deepwell.h, field by field: the
same names, in the same order, of the same C types. A field added to the header and not to Python
(or a type changed on one side) fails here, not as bytes read at the wrong offset."""
import ctypes
import os
import pathlib
import re

import pytest

from deepwell import _lib, checkpoint, kv, vectors

HEADERS = pathlib.Path(__file__).resolve().parents[2] / "include" / "deepwell" / "c"  # deepwell.h and its parts
HEADER = HEADERS / "deepwell.h"


def header_text() -> str:
    parts = re.findall(r'#include "deepwell/c/(\w+\.h)"', (HEADERS / "deepwell.h").read_text())
    return "\n".join((HEADERS / name).read_text() for name in parts)

C_TYPES = {
    "uint8_t": ctypes.c_uint8, "int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32,
    "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64, "double": ctypes.c_double, "float": ctypes.c_float,
    "const char*": ctypes.c_char_p, "char": ctypes.c_char,
}

# Each C structure and the ctypes class that mirrors it.
MIRRORS = {
    "dw_cache_options": _lib.CacheOptions,
    "dw_array_options": _lib.ArrayOptions,
    "dw_array_info": _lib.Info,
    "dw_stats": _lib.Stats,
    "dw_checkpoint_tensor": checkpoint._Tensor,
    "dw_checkpoint_options": checkpoint._Options,
    "dw_checkpoint_save_info": checkpoint._SaveInfo,
    "dw_kv_options": kv._Options,
    "dw_kv_result": kv._Result,
    "dw_kv_info": kv._Info,
    "dw_vectors_build_options": vectors._BuildOptions,
    "dw_vectors_build_info": vectors._BuildInfo,
    "dw_vectors_options": vectors._Options,
    "dw_vectors_info": vectors._Info,
    "dw_vectors_search_result": vectors._Result,
    "dw_vectors_search_options": vectors._SearchOptions,
    "dw_vectors_search_counts": vectors._Counts,
}


def header_structs():
    """{name: [(field, C type, array length or None)]} of every structure the header defines."""
    text = re.sub(r"/\*.*?\*/", "", header_text(), flags=re.S)
    out = {}
    for m in re.finditer(r"typedef struct (dw_\w+) \{(.*?)\} \1;", text, flags=re.S):
        fields = []
        for decl in m.group(2).split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            t = re.match(r"((?:const )?\w+\s*\*?)\s*(.*)", decl)
            ctype, names = t.group(1).replace(" *", "*").strip(), t.group(2)
            for n in names.split(","):
                n = n.strip()
                star = n.startswith("*")
                a = re.match(r"\**\s*(\w+)(?:\[(\d+)\])?", n)  # "* members": a pointer to pointer
                fields.append((a.group(1), ctype + ("*" if star else ""), int(a.group(2)) if a.group(2) else None))
        out[m.group(1)] = fields
    return out


def expected_ctype(ctype, length):
    if ctype in MIRRORS:  # a structure inside a structure: its own mirror
        return MIRRORS[ctype]
    if ctype.endswith("*") and ctype not in C_TYPES:  # a pointer to anything else
        base = C_TYPES.get(ctype.replace("const ", "").rstrip("*"))
        return ("pointer", base)
    t = C_TYPES[ctype]
    return t * length if length else t


@pytest.mark.skipif(not HEADER.exists(), reason="run from a checkout (the header is not installed)")
def test_every_structure_of_the_header_is_mirrored_field_by_field():
    structs = header_structs()
    assert set(MIRRORS) <= set(structs), f"structures the test expects but the header lacks: {set(MIRRORS) - set(structs)}"
    unmirrored = {s for s in structs if s not in MIRRORS}
    assert not unmirrored, f"structures of deepwell.h with no ctypes mirror checked here: {unmirrored}"
    for name, cls in MIRRORS.items():
        want = structs[name]
        got = cls._fields_
        assert [f for f, _, _ in want] == [f for f, _ in got], f"{name}: fields differ from {cls.__module__}.{cls.__name__}"
        for (field, ctype, length), (_, pytype) in zip(want, got):
            e = expected_ctype(ctype, length)
            if isinstance(e, tuple):  # a pointer: POINTER(base) or a void pointer
                ok = pytype is ctypes.c_void_p or (e[1] is not None and pytype is ctypes.POINTER(e[1]))
            elif length:
                ok = issubclass(pytype, ctypes.Array) and pytype._type_ is e._type_ and pytype._length_ == length
            else:
                ok = pytype is e
            assert ok, f"{name}.{field}: C {ctype}{f'[{length}]' if length else ''}, ctypes {pytype}"


def test_the_parser_sees_what_the_header_has():
    # The check above cannot pass by reading nothing.
    structs = header_structs()
    assert len(structs["dw_array_options"]) >= 10 and structs["dw_array_options"][:2] == [
        ("size", "uint32_t", None), ("path", "const char*", None)]
    assert ("backend", "char", 16) in structs["dw_array_info"]
    assert [f for f, _, _ in structs["dw_kv_result"]][:4] == ["ops", "inserted", "updated", "erased"]
    # One set of cache fields, inside each options structure that makes a cache.
    for name in ("dw_array_options", "dw_checkpoint_options", "dw_kv_options"):
        assert ("cache", "dw_cache_options", None) in structs[name], name
    assert [f for f, _, _ in structs["dw_cache_options"]][:3] == ["device", "page_size", "cache_bytes"]


def test_every_entry_point_fills_the_cache_fields_alike():
    # The init functions put each entry point's defaults in the same fields; what differs is
    # only what the entry point's own defaults say (a checkpoint store's 64 KiB pages).
    a, c, k = _lib.ArrayOptions(), checkpoint._Options(), kv._Options()
    _lib.lib.dw_array_options_init(ctypes.byref(a))
    checkpoint.lib.dw_checkpoint_options_init(ctypes.byref(c))
    kv.lib.dw_kv_options_init(ctypes.byref(k))
    for o in (a, c, k):
        # The size the library's init writes is C's sizeof: the ctypes layout is the header's.
        assert o.size == ctypes.sizeof(o), (type(o).__name__, o.size, ctypes.sizeof(o))
        assert o.cache.device == -1 and o.cache.cache_bytes > 0 and o.cache.timeout_s > 0 and o.cache.pollers > 0
    assert a.cache.page_size == 4096 or os.environ.get("DEEPWELL_PAGE_SIZE")
    assert c.cache.page_size == 65536 and c.cache.queue_entries == 32
    assert k.cache.page_size == 0, "a KV store's page follows its buckets, known at open"
    assert a.cache.direct_files == 1 or os.environ.get("DEEPWELL_DIRECT_FILES")
    assert c.cache.direct_files == 0 and k.cache.direct_files == 0, "stores written in place map no file"


@pytest.mark.skipif(not HEADER.exists(), reason="run from a checkout (the header is not installed)")
def test_the_package_speaks_the_headers_abi_version():
    m = re.search(r"#define DW_ABI_VERSION (\d+)", header_text())
    assert m and int(m.group(1)) == _lib.ABI_VERSION == _lib.lib.dw_abi_version()


def test_the_library_exports_the_c_abi_only():
    # The linker's version script (src/capi/deepwell_c.map): dw_* symbols, each of the ABI's
    # version node, and no C++ internals a program could bind to by accident.
    import shutil
    import subprocess
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) to list the library's symbols")
    out = subprocess.run([nm, "-D", "--defined-only", "--with-symbol-versions", _lib._library_path()],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    names = [line.split()[-1] for line in out if line.strip()]
    assert names, "nm listed nothing"
    functions = [n for n in names if not n.startswith("DEEPWELL_C_")]  # the version node's own symbol
    others = [n for n in functions if not n.startswith("dw_")]
    assert not others, f"exported beyond the C ABI: {others[:10]}"
    assert all(n.endswith(f"@@DEEPWELL_C_{_lib.ABI_VERSION}") for n in functions), functions[:5]
    assert any(n.startswith("dw_array_open@@") for n in functions)
