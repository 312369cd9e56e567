"""A newcomer's first hour with the `deepwell` command, on a machine without a GPU.

Every command the quick-start sections of README.md and docs/*.md show is run
as the doc writes it, with only the sizes made small (and paths moved into a
temporary directory). A command that needs a GPU must say so in one line
that names the `--cpu` command to run instead; that command is then run and
must succeed. Each step first checks that its doc still shows the command,
so a doc that changes its quick start fails here until this test follows.

The binary: DEEPWELL_CLI (conftest.py's deepwell_cli fixture; skipped where
there is none). CUDA_VISIBLE_DEVICES="" hides any GPU, so a GPU machine runs
the GPU-less path too. About 15 s on 2 cores."""
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import tempfile

import pytest

from conftest import serving

REPO = pathlib.Path(__file__).resolve().parents[2]
NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}

# (doc, the command as the doc shows it, {text in it: what the test runs instead}, what the output says)
STEPS = [
    ("README.md", "build/bin/deepwell graph generate --scale 22 --degree 16 --weights -o g.dwg",
     {"--scale 22": "--scale 12"}, "nodes"),
    ("README.md", "build/bin/deepwell graph bfs g.dwg --baselines", {}, "results: agree"),
    ("README.md", "build/bin/deepwell graph cc g.dwg --cpu --check", {}, "check against the CPU reference: equal"),
    ("docs/graphs.md", "$D graph generate --scale 20 --degree 16 --weights -o g.dwg",
     {"--scale 20": "--scale 12"}, "nodes"),
    ("docs/graphs.md", "$D graph generate --scale 20 --uniform -o u.dwg", {"--scale 20": "--scale 12"}, "nodes"),
    ("docs/graphs.md", "$D graph convert web-Google.txt --symmetrize -o web.dwg", {}, "web.dwg"),
    ("docs/graphs.md", "$D graph symmetrize directed.dwg -o undirected.dwg", {}, "undirected.dwg"),
    ("docs/graphs.md", "$D graph info g.dwg --check", {}, "every offset and id in range"),
    ("docs/graphs.md", "$D graph bfs g.dwg --cache 1G --page 4096", {"--cache 1G": "--cache 16M"}, "results: agree"),
    ("docs/graphs.md", "$D graph cc g.dwg --baselines", {}, "results: agree"),
    ("docs/graphs.md", "$D graph sssp g.dwg --cpu --check", {}, "check against the CPU reference: equal"),
    ("README.md", "build/bin/deepwell table gen /var/tmp/taxi.dwcol --rows 100000000",
     {"--rows 100000000": "--rows 200000"}, "200000 trips"),
    ("docs/analytics.md", "build/bin/deepwell table info /var/tmp/taxi.dwcol", {}, "trip_distance"),
    ("README.md", "build/bin/deepwell table query /var/tmp/taxi.dwcol --check", {}, "check against a plain scan: equal"),
    ("docs/files.md", "deepwell grep /usr/src/linux-source-6.1 --dict /usr/share/dict/words --out-dir /tmp --check",
     {"/usr/src/linux-source-6.1": "./tree", "/usr/share/dict/words": "words", "--out-dir /tmp": "--out-dir out"},
     "check against a plain scan: equal"),
    ("docs/files.md", "deepwell grep ./tree --cpu --check", {"./tree --cpu": "./tree --dict words --cpu"},
     "check against a plain scan: equal"),
    ("docs/kv.md", "deepwell kv create /var/tmp/t.kv --value-bytes 32 --capacity 100000", {}, "32-byte values"),
    ("docs/kv.md", "deepwell kv set /var/tmp/t.kv 7 hello", {}, "1 new"),
    ("docs/kv.md", "deepwell kv set /var/tmp/t.kv 8 0x0102ff", {}, "1 new"),
    ("docs/kv.md", "deepwell kv set /var/tmp/t.kv --from pairs.txt", {}, "set 2 pair(s)"),
    ("docs/kv.md", "deepwell kv delete /var/tmp/t.kv 8", {}, "deleted 1 key(s)"),
    ("docs/kv.md", "deepwell kv info /var/tmp/t.kv", {}, "recovery"),
    ("docs/kv.md", "deepwell kv check /var/tmp/t.kv", {}, "every pair reads back"),
]


def run(cli, args, cwd, timeout=60):
    return subprocess.run([cli, *args], cwd=cwd, env=NO_GPU, capture_output=True, text=True, timeout=timeout)


def as_run(command, subs, tmp):
    """The doc's command with the test's sizes and paths: argv without the program."""
    for old, new in subs.items():
        assert old in command
        command = command.replace(old, new)
    command = command.replace("/var/tmp/", f"{tmp}/")
    words = shlex.split(command)
    assert words[0] in ("build/bin/deepwell", "$D", "deepwell"), command
    return words[1:]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("newcomer")
    (d / "web-Google.txt").write_text("# FromNodeId\tToNodeId\n0\t1\n1\t2\n2\t0\n3\t1\n")
    (d / "tree").mkdir()
    (d / "tree" / "notes.txt").write_text("the quick brown fox jumps over the lazy dog\nthe end\n")
    (d / "words").write_text("the\nfox\ndog\nend\n")
    (d / "out").mkdir()
    (d / "pairs.txt").write_text("1 one\n2 0x02\n")
    return d


@pytest.fixture
def directed(deepwell_cli, workdir):
    # docs/graphs.md's symmetrize step takes a directed graph: the newcomer makes one.
    if not (workdir / "directed.dwg").exists():
        assert run(deepwell_cli, ["graph", "generate", "--scale", "10", "--directed", "-o", "directed.dwg", "-q"],
                   workdir).returncode == 0


def test_first_commands(deepwell_cli):
    r = run(deepwell_cli, ["--version"], REPO)
    assert r.returncode == 0 and r.stdout.startswith("deepwell ")
    r = run(deepwell_cli, ["--help"], REPO)
    assert r.returncode == 0 and all(c in r.stdout for c in ("graph", "table", "kv", "grep", "serve", "settings"))
    r = run(deepwell_cli, ["settings"], REPO)
    assert r.returncode == 0 and "DEEPWELL_CACHE_BYTES" in r.stdout
    r = run(deepwell_cli, ["grahp", "bfs"], REPO)  # a typo: named, and the commands listed
    assert r.returncode == 2 and "'grahp' is not a command" in r.stderr and "graph" in r.stderr


@pytest.mark.parametrize("doc,command,subs,says", STEPS, ids=[f"{d}: {c[:60]}" for d, c, _, _ in STEPS])
def test_quick_start_step(deepwell_cli, workdir, directed, doc, command, subs, says):
    assert command in (REPO / doc).read_text(), f"{doc} no longer shows `{command}`: update this test"
    args = as_run(command, subs, workdir)
    r = run(deepwell_cli, args, workdir)
    if r.returncode != 0 and "no usable CUDA GPU" in r.stderr:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, f"more than one line for a missing GPU:\n{r.stderr}"
        suggested = re.search(r"`deepwell ([^`]*)`", lines[0])
        assert suggested, f"the message names no command to run instead: {lines[0]}"
        assert "--cpu" in suggested.group(1)
        r = run(deepwell_cli, shlex.split(suggested.group(1)), workdir)
    assert r.returncode == 0, f"deepwell {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    assert says in r.stdout, r.stdout


def test_kv_get_as_the_doc_shows(deepwell_cli, workdir):
    # docs/kv.md: "7 hello", "8 0x0102ff"; "9 not found" on stderr, exit 1 (8 was deleted by the steps above
    # where they ran; this test makes its own store so it stands alone).
    doc = (REPO / "docs/kv.md").read_text()
    assert "deepwell kv get /var/tmp/t.kv 7 8 9" in doc
    kv = workdir / "get.kv"
    assert run(deepwell_cli, ["kv", "create", str(kv), "--value-bytes", "32", "--capacity", "100000"], workdir).returncode == 0
    assert run(deepwell_cli, ["kv", "set", str(kv), "7", "hello"], workdir).returncode == 0
    assert run(deepwell_cli, ["kv", "set", str(kv), "8", "0x0102ff"], workdir).returncode == 0
    r = run(deepwell_cli, ["kv", "get", str(kv), "7", "8", "9"], workdir)
    assert r.returncode == 1
    assert r.stdout.splitlines() == ["7 hello", "8 0x0102ff"]
    assert r.stderr.strip() == "9 not found"


def test_server_quick_start(deepwell_cli, workdir):
    """docs/server.md and README: `deepwell serve --config examples/datasets.toml` (its file made by
    scripts/demo-data, small), then `deepwell stat`. The socket moves into the test's directory and the
    metrics port is left out (another server may hold it)."""
    assert "deepwell serve --config examples/datasets.toml" in (REPO / "docs/server.md").read_text()
    assert "scripts/demo-data" in (REPO / "examples/datasets.toml").read_text()
    # The example grants the file to everyone: it must lie where everyone can read it, as /var/tmp is
    # (pytest's tmp_path is private; the server refuses to be the deputy of a grant wider than the file).
    public = pathlib.Path(tempfile.mkdtemp(prefix="deepwell-newcomer-"))
    public.chmod(0o755)
    feats = public / "deepwell-features.f32"
    r = subprocess.run(["bash", REPO / "scripts/demo-data", feats, "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    cfg = (REPO / "examples/datasets.toml").read_text()
    assert "/var/tmp/deepwell-features.f32" in cfg
    sock = workdir / "dw.sock"
    cfg = cfg.replace("/var/tmp/deepwell-features.f32", str(feats))
    cfg = re.sub(r'(?m)^metrics = .*$', "", cfg)
    cfg = cfg.replace("[server]\n", f'[server]\nsocket = "{sock}"\n', 1)
    (workdir / "datasets.toml").write_text(cfg)
    r = run(deepwell_cli, ["serve", "--config", "datasets.toml", "--check-config"], workdir)
    assert r.returncode == 0, r.stderr
    try:
        with serving(deepwell_cli, pathlib.Path("datasets.toml"), sock, cwd=workdir, env=NO_GPU, text=True):
            r = run(deepwell_cli, ["stat", "--socket", str(sock)], workdir)
            assert r.returncode == 0, r.stderr
            assert "features" in r.stdout and str(feats) in r.stdout  # the whole target, not cut
    finally:
        shutil.rmtree(public)
