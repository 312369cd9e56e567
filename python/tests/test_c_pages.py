"""docs/c/: a reference page for every function of the C ABI, none for a function it does not
have, each as docs/c/pages.py writes it from the header's prototypes (a header changed without
its pages, or a page edited by hand, fails here)."""
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "c" / "pages.py"

pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="run from a checkout")


def load():
    spec = importlib.util.spec_from_file_location("c_pages", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_every_function_has_its_page_and_every_page_a_function():
    m = load()
    functions = set(m.prototypes())
    assert len(functions) >= 30, "the header's prototypes were not found"
    assert functions == set(m.PAGES), (sorted(functions - set(m.PAGES)), sorted(set(m.PAGES) - functions))
    on_disk = {p.stem for p in (ROOT / "docs" / "c").glob("dw_*.md")}
    assert on_disk == functions, (sorted(functions - on_disk), sorted(on_disk - functions))


def test_the_pages_are_what_the_header_gives():
    m = load()
    for name, text in m.pages().items():
        assert (ROOT / "docs" / "c" / f"{name}.md").read_text() == text, f"docs/c/{name}.md: run docs/c/pages.py"
    assert (ROOT / "docs" / "c" / "README.md").read_text() == m.index(list(m.pages()))
