"""docs/results.md's table of current figures is what scripts/results-table makes of
bench/results/*.json (a figure edited by hand, or a record added without rerunning
the script, fails here); the other docs name no commit and the README stays short."""
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "results-table"

pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="run from a checkout")

# A commit hash: 7-40 hex digits with a digit and a letter a-f, a word of its own.
# Not one after "0x" (a constant in code: 0xdeadbeef) nor inside a longer word.
HASH = re.compile(r"(?<![0-9A-Za-z_])(?<!0x)(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z_])")


def results_table(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_table_is_what_the_records_give():
    r = results_table("--check")
    assert r.returncode == 0, r.stderr + "\nrun scripts/results-table"


def test_check_fails_on_a_doctored_figure(tmp_path):
    doc = tmp_path / "results.md"
    shutil.copy(ROOT / "docs" / "results.md", doc)
    results = tmp_path / "results"
    shutil.copytree(ROOT / "bench" / "results", results)
    assert results_table("--check", "--results", str(results), "--doc", str(doc)).returncode == 0
    # One figure changed in the page: --check must say so.
    text = doc.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `") and " | " in line)
    cells = row.split(" | ")
    cells[1] = "999"
    doc.write_text(text.replace(row, " | ".join(cells)))
    r = results_table("--check", "--results", str(results), "--doc", str(doc))
    assert r.returncode != 0 and "differs" in r.stderr
    # Writing it again mends it.
    assert results_table("--results", str(results), "--doc", str(doc)).returncode == 0
    assert results_table("--check", "--results", str(results), "--doc", str(doc)).returncode == 0
    # And a record changed under an unchanged page fails too.
    newest = sorted(results.glob("*.json"))[-1]
    newest.write_text(newest.read_text().replace('"date"', '"date_"', 1) + "\n")
    (results / "9999-12-31-zzzzzzz-extra.json").write_text('{"commit": "abc1234", "ratios": {"x_vs_y": 1.5}}')
    assert results_table("--check", "--results", str(results), "--doc", str(doc)).returncode != 0


def test_the_hash_rule():
    assert HASH.search("measured at 1a2b3c4 on an H200")
    assert HASH.search("commit 07f5a71")
    # A hex constant, a word of letters only, a number, a hash inside an identifier: not commits.
    for fine in ("0xdeadbeef", "0x1edc6f41", "deadbeef", "1234567", "cafe_babe1", "abcdefa"):
        assert not HASH.search(fine), fine


def test_no_commit_hash_in_the_docs_but_the_results_page():
    found = []
    for md in sorted((ROOT / "docs").glob("*.md")):
        if md.name == "results.md":
            continue
        for n, line in enumerate(md.read_text().splitlines(), 1):
            found += [f"docs/{md.name}:{n}: {m.group(0)}" for m in HASH.finditer(line)]
    assert not found, "commit hashes belong in docs/results.md and bench/results:\n" + "\n".join(found)


def test_readme_is_at_most_150_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines"
