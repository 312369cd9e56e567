"""scripts/check-layers refuses what it is there to refuse: a layer that
includes one above it, a stray header at the top of include/deepwell/, the
library reaching into apps/, an app reaching into src/, and code above the
link naming the controller. Each case is a small tree of its own beside a
clean one that passes."""
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "check-layers"


def tree(tmp_path, files):
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(tmp_path)], capture_output=True, text=True)


CLEAN = {
    "include/deepwell/deepwell.hpp": '#include "deepwell/views/array.hpp"\n',
    "include/deepwell/common/error.hpp": "#pragma once\n",
    "include/deepwell/cache/page_cache.hpp": '#include "deepwell/common/error.hpp"\n',
    "include/deepwell/views/array.hpp": '#include "deepwell/cache/page_cache.hpp"\n',
    "include/deepwell/controller/controller.hpp": '#include "deepwell/cache/page_cache.hpp"\n',
    "src/cache/page_cache.cpp": '#include "deepwell/cache/page_cache.hpp"\n#include "cache/inner.hpp"\n',
    "src/cache/inner.hpp": "// the controller's reads, in a comment, are fine\n",
    "apps/grep/grep.cpp": '#include "deepwell/controller/controller.hpp"\n#include "grep/grep.hpp"\n',
    "apps/grep/grep.hpp": '#include "deepwell/deepwell.hpp"\n',
}


def test_the_repository_holds_to_its_layers():
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_clean_tree_passes(tmp_path):
    r = tree(tmp_path, CLEAN)
    assert r.returncode == 0, r.stdout


# (what the tree adds to the clean one, what the refusal names)
REFUSED = {
    "a layer including one above it": (
        {"include/deepwell/cache/page_cache.hpp": '#include "deepwell/views/array.hpp"\n'},
        "the cache layer includes deepwell/views/array.hpp"),
    "a source including an upper internal header": (
        {"src/controller/wire.hpp": "#pragma once\n", "src/common/log.cpp": '#include "controller/wire.hpp"\n'},
        "the common layer includes controller/wire.hpp"),
    "a header at the top that is no umbrella": (
        {"include/deepwell/stray.hpp": "#pragma once\n"}, "include/deepwell/stray.hpp"),
    "the library including an app": (
        {"src/cache/page_cache.cpp": '#include "grep/grep.hpp"\n'}, "application header grep/grep.hpp"),
    "an app including an internal header": (
        {"apps/grep/grep.cpp": '#include "cache/inner.hpp"\n'}, "applications use only the public headers"),
    "code above the link naming the controller": (
        {"src/cache/page_cache.cpp": "void f(deepwell::controller& c);\n"}, "names the controller"),
    "an unknown folder": ({"src/misc/x.cpp": "int x;\n"}, "folder 'misc'"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_each_breach_fails_by_name(tmp_path, case):
    files, message = REFUSED[case]
    r = tree(tmp_path, {**CLEAN, **files})
    assert r.returncode == 1 and message in r.stdout, r.stdout
