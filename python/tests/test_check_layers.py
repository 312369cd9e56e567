"""scripts/check-layers refuses what it is there to refuse: a layer that
includes one above it, a stray header at the top of include/deepwell/, the
library reaching into apps/, an app reaching into src/, and code above the
link naming the controller. Each case is a small tree of its own beside a
clean one that passes."""
import pathlib
import subprocess
import sys

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


def test_a_layer_including_one_above_it_fails(tmp_path):
    r = tree(tmp_path, {**CLEAN, "include/deepwell/cache/page_cache.hpp": '#include "deepwell/views/array.hpp"\n'})
    assert r.returncode == 1 and "the cache layer includes deepwell/views/array.hpp" in r.stdout


def test_a_source_including_an_upper_internal_header_fails(tmp_path):
    r = tree(tmp_path, {**CLEAN, "src/controller/wire.hpp": "#pragma once\n",
                        "src/common/log.cpp": '#include "controller/wire.hpp"\n'})
    assert r.returncode == 1 and "the common layer includes controller/wire.hpp" in r.stdout


def test_a_header_at_the_top_that_is_no_umbrella_fails(tmp_path):
    r = tree(tmp_path, {**CLEAN, "include/deepwell/stray.hpp": "#pragma once\n"})
    assert r.returncode == 1 and "include/deepwell/stray.hpp" in r.stdout


def test_the_library_including_an_app_fails(tmp_path):
    r = tree(tmp_path, {**CLEAN, "src/cache/page_cache.cpp": '#include "grep/grep.hpp"\n'})
    assert r.returncode == 1 and "application header grep/grep.hpp" in r.stdout


def test_an_app_including_an_internal_header_fails(tmp_path):
    r = tree(tmp_path, {**CLEAN, "apps/grep/grep.cpp": '#include "cache/inner.hpp"\n'})
    assert r.returncode == 1 and "applications use only the public headers" in r.stdout


def test_code_above_the_link_naming_the_controller_fails(tmp_path):
    r = tree(tmp_path, {**CLEAN, "src/cache/page_cache.cpp": "void f(deepwell::controller& c);\n"})
    assert r.returncode == 1 and "names the controller" in r.stdout


def test_an_unknown_folder_fails(tmp_path):
    r = tree(tmp_path, {**CLEAN, "src/misc/x.cpp": "int x;\n"})
    assert r.returncode == 1 and "folder 'misc'" in r.stdout
