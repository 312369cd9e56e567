"""The `deepwell` command as a user meets it on a machine without a GPU: one
clear line (and the --cpu to use) where a command defaults to the GPU, the
version, unknown commands named, `deepwell kv`, progress on long runs,
--baselines and a too-small --cache on CPU threads, `deepwell stat`'s
columns, the Q0 report, the defaults in --help, and an idle server's CPU.

Runs the binary from DEEPWELL_CLI (conftest.py's deepwell_cli fixture).
CUDA_VISIBLE_DEVICES="" hides any GPU, so a GPU machine sees what a
GPU-less one does."""
import os
import pathlib
import re
import signal
import subprocess
import time

import pytest

from conftest import server_config, serving

REPO = pathlib.Path(__file__).resolve().parents[2]
NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def dw(cli, *args, cwd=None, timeout=60, env=NO_GPU, stdin=None):
    return subprocess.run([cli, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, input=stdin)


@pytest.fixture
def small(tmp_path, deepwell_cli):
    """A small graph (with weights), a small taxi table and a small tree of text files (0.2 s)."""
    d = tmp_path
    assert dw(deepwell_cli, "graph", "generate", "--scale", 10, "--weights", "-o", d / "g.dwg", "-q").returncode == 0
    assert dw(deepwell_cli, "table", "gen", d / "t.dwcol", "--rows", 50000).returncode == 0
    (d / "tree").mkdir()
    (d / "tree" / "a.txt").write_text("alpha beta alpha\n")
    (d / "words").write_text("alpha\nbeta\n")
    return d


# ---- 1. a GPU command without a GPU: one line, the reason, the --cpu ----

@pytest.mark.parametrize("args", [
    ["graph", "bfs", "{d}/g.dwg", "--baselines"],
    ["table", "query", "{d}/t.dwcol", "--check"],
    ["grep", "{d}/tree", "--dict", "{d}/words"],
])
def test_no_gpu_is_one_line_naming_the_reason_and_the_cpu_option(deepwell_cli, small, args):
    args = [a.format(d=small) for a in args]
    r = dw(deepwell_cli, *args)
    assert r.returncode not in (0,) and r.returncode < 124, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "no usable CUDA GPU was found" in lines[0]
    assert "cuda" in lines[0].lower()  # the CUDA reason, or that CUDA is not built in
    suggested = re.search(r"`(deepwell [^`]*)`", lines[0]).group(1)
    assert suggested.endswith(" --cpu") and " ".join(args) in suggested
    # The suggestion runs.
    again = dw(deepwell_cli, *suggested.split()[1:])
    assert again.returncode == 0, again.stderr


# ---- 2. --version; unknown and missing commands ----

def test_version_names_the_release_the_commit_and_cuda(deepwell_cli):
    r = dw(deepwell_cli, "--version")
    assert r.returncode == 0
    assert re.match(r"deepwell \d+\.\d+\.\d+ \(commit ([0-9a-f]+(\+changes)?|unknown); ", r.stdout), r.stdout
    assert "CUDA" in r.stdout


@pytest.mark.parametrize("args,where,names", [
    (["frobnicate"], "deepwell: 'frobnicate' is not a command", ["graph", "table", "kv", "grep", "serve"]),
    (["graph", "walk", "g.dwg"], "deepwell graph: 'walk' is not a command", ["generate", "bfs", "pagerank"]),
    (["kv", "put", "x.kv"], "deepwell kv: 'put' is not a command", ["create", "set", "get", "delete", "check"]),
    ([], "deepwell: a command is required", ["graph", "kv"]),
])
def test_unknown_or_missing_command_lists_the_valid_ones(deepwell_cli, args, where, names):
    r = dw(deepwell_cli, *args)
    assert r.returncode == 2
    assert where in r.stderr, r.stderr
    assert "subcommand is required" not in r.stderr
    for n in names:
        assert n in r.stderr


# ---- 3. deepwell kv ----

def test_kv_create_set_get_delete_info_check(deepwell_cli, tmp_path):
    kv = tmp_path / "t.kv"
    r = dw(deepwell_cli, "kv", "create", kv, "--value-bytes", 16, "--capacity", 1000)
    assert r.returncode == 0, r.stderr
    assert "16-byte values" in r.stdout
    assert dw(deepwell_cli, "kv", "create", kv, "--value-bytes", 16).returncode == 2  # exists: refused
    assert dw(deepwell_cli, "kv", "set", kv, 7, "hello world").returncode == 0
    assert dw(deepwell_cli, "kv", "set", kv, "0x10", "0x0102ff").returncode == 0
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("# a comment\n1 one\n\n2 two words\n3 0xdeadbeef\n1 uno\n")
    r = dw(deepwell_cli, "kv", "set", kv, "--from", pairs)
    assert r.returncode == 0, r.stderr
    assert "set 4 pair(s)" in r.stdout
    r = dw(deepwell_cli, "kv", "get", kv, 1, 2, 3, 7, 16, 99)
    assert r.returncode == 1  # 99 is missing
    assert r.stdout.splitlines() == ["1 uno", "2 two words", "3 0xdeadbeef", "7 hello world", "16 0x0102ff"]
    assert r.stderr.strip() == "99 not found"
    # get's output is a --from file: it reads back the same.
    kv2 = tmp_path / "u.kv"
    assert dw(deepwell_cli, "kv", "create", kv2, "--value-bytes", 16, "--capacity", 1000).returncode == 0
    assert dw(deepwell_cli, "kv", "set", kv2, "--from", "-", stdin=r.stdout).returncode == 0
    assert dw(deepwell_cli, "kv", "get", kv2, 1, 2, 3, 7, 16).stdout == r.stdout
    r = dw(deepwell_cli, "kv", "get", kv, 3, "--hex")
    assert r.stdout.strip() == "3 0x" + "deadbeef" + "00" * 12
    r = dw(deepwell_cli, "kv", "delete", kv, 2, 98)
    assert r.returncode == 1 and "98 not found" in r.stderr and "deleted 1 key" in r.stdout
    r = dw(deepwell_cli, "kv", "info", kv)
    assert r.returncode == 0
    assert "16 bytes" in r.stdout and "recovery" in r.stdout
    r = dw(deepwell_cli, "kv", "check", kv)
    assert r.returncode == 0, r.stderr
    assert "4 key(s)" in r.stdout and "every pair reads back" in r.stdout


@pytest.mark.parametrize("args,says", [
    (["set", "{kv}", "5", "x" * 9], "is 9 bytes; the store's values are 8"),
    (["set", "{kv}", "5", "0x123"], "two digits a byte"),
    (["set", "{kv}", "-5", "a"], "is not a key"),
    (["set", "{kv}", "18446744073709551615", "a"], "is not a key"),
    (["set", "{kv}", "5"], "KEY VALUE"),
    (["get", "{kv}", "abc"], "is not a key"),
    (["get", "{dir}/absent.kv", "1"], "absent.kv"),
    (["set", "{kv}", "--from", "{dir}/bad.txt"], "bad.txt line 2"),
    (["create", "{dir}/n.kv", "--value-bytes", "7"], "value"),
    (["check", "{dir}/bad.txt"], "bad.txt"),
])
def test_kv_refuses_bad_input_by_name(deepwell_cli, tmp_path, args, says):
    kv = tmp_path / "s.kv"
    assert dw(deepwell_cli, "kv", "create", kv, "--value-bytes", 8, "--capacity", 100).returncode == 0
    (tmp_path / "bad.txt").write_text("1 a\n2\n")
    r = dw(deepwell_cli, "kv", *[a.format(kv=kv, dir=tmp_path) for a in args])
    assert r.returncode == 2, r
    assert says in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_kv_gpu_without_a_gpu_says_so(deepwell_cli, tmp_path):
    kv = tmp_path / "g.kv"
    r = dw(deepwell_cli, "kv", "create", kv, "--gpu")
    assert r.returncode == 2
    assert "no usable CUDA GPU" in r.stderr and f"`deepwell kv create {kv}`" in r.stderr, r.stderr


# ---- 4. progress on long CPU runs ----

def test_a_long_cpu_run_reports_progress_and_a_short_one_does_not(deepwell_cli, small, tmp_path):
    r = dw(deepwell_cli, "graph", "pagerank", small / "g.dwg", "--cpu", "--mode", "memory")
    assert r.returncode == 0 and r.stderr == ""  # under 2 s: nothing
    # Enough iterations for a few seconds on one thread.
    g = tmp_path / "big.dwg"
    assert dw(deepwell_cli, "graph", "generate", "--scale", 15, "-o", g, "-q").returncode == 0
    t0 = time.monotonic()
    proc = subprocess.Popen([deepwell_cli, "graph", "pagerank", str(g), "--cpu", "--mode", "memory", "--threads", "1",
                             "--iterations", "100000"], env=NO_GPU, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()  # not a terminal: a plain line, the first at 2 s
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert time.monotonic() - t0 < 10
    assert re.match(r"pagerank \(memory, CPU threads\): \d+ s, iteration \d+ of 100000 done, [\d.]+ M edges", line), line


# ---- 5. --baselines and a small --cache with --cpu ----

def test_cpu_baselines_run_both_cpu_modes_and_say_what_is_gpu_only(deepwell_cli, small):
    r = dw(deepwell_cli, "graph", "bfs", small / "g.dwg", "--cpu", "--baselines")
    assert r.returncode == 0, r.stderr
    assert "zerocopy and the H2D ceiling need a GPU run" in r.stdout
    assert re.search(r"^bfs\s+deepwell", r.stdout, re.M) and re.search(r"^bfs\s+memory", r.stdout, re.M)
    assert "results: agree" in r.stdout


def test_cpu_cache_too_small_says_how_big(deepwell_cli, small):
    r = dw(deepwell_cli, "graph", "bfs", small / "g.dwg", "--cpu", "--cache", "4K", "--threads", 2)
    assert r.returncode == 2
    assert "too small" in r.stderr and "2 CPU client thread(s)" in r.stderr and "give --cache 256 KiB" in r.stderr
    assert "I/O error" not in r.stderr
    assert dw(deepwell_cli, "graph", "bfs", small / "g.dwg", "--cpu", "--cache", "256K", "--threads", 2).returncode == 0


# ---- 6. stat's columns, Q0's report, --help's defaults, the docs' scripts, an idle server ----

@pytest.fixture
def server(deepwell_cli, tmp_path):
    deep = tmp_path / "a-directory-with-a-long-name" / "and-another-one"
    deep.mkdir(parents=True)
    data = deep / "features-with-a-long-name.f32"
    data.write_bytes(b"\0" * (1 << 20))
    sock = tmp_path / "dw.sock"
    # pytest's tmp_path is private to this uid: the grant to everyone widens it.
    grant = dict(dataset="*", everyone=True, access="read", widen=True)
    (tmp_path / "ds.toml").write_text(server_config(sock, [dict(name="features", file=data)], [grant], pollers=2))
    with serving(deepwell_cli, tmp_path / "ds.toml", sock) as proc:
        yield proc, sock, data


def test_stat_prints_whole_targets(deepwell_cli, server):
    proc, sock, data = server
    r = dw(deepwell_cli, "stat", "--socket", sock)
    assert r.returncode == 0, r.stderr
    assert str(data) in r.stdout, r.stdout


def cpu_seconds(pid):
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_an_idle_server_sleeps(server):
    proc = server[0]
    time.sleep(0.5)  # past the pollers' spin after start
    c0, t0 = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(2)
    share = (cpu_seconds(proc.pid) - c0) / (time.monotonic() - t0)
    assert share < 0.01, f"an idle server used {100 * share:.1f}% of a core"


def test_q0_reports_no_net_amount(deepwell_cli, small):
    r = dw(deepwell_cli, "table", "query", small / "t.dwcol", "--cpu", "-q", 0, "-q", 1, "--check")
    assert r.returncode == 0, r.stderr
    q0 = next(l for l in r.stdout.splitlines() if l.startswith("Q0"))
    q1 = next(l for l in r.stdout.splitlines() if l.startswith("Q1"))
    assert "net" not in q0 and "/mi" not in q0
    assert re.search(r"net \$[1-9][\d.]*, \$[\d.]+/mi", q1), q1


def test_help_shows_defaults(deepwell_cli):
    r = dw(deepwell_cli, "table", "gen", "--help")
    assert re.search(r"--rows\D*1048576", r.stdout), r.stdout
    r = dw(deepwell_cli, "kv", "create", "--help")
    assert re.search(r"--value-bytes\D*32", r.stdout) and re.search(r"--capacity\D*1048576", r.stdout), r.stdout


def test_scripts_named_in_the_docs_exist():
    texts = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").iterdir())]
    named = set()
    for t in texts:
        if t.is_file():
            named |= set(re.findall(r"\bscripts/[A-Za-z0-9_.-]*[A-Za-z0-9_]", t.read_text(errors="replace")))
    assert named, "no scripts named at all?"
    assert sorted(n for n in named if not (REPO / n).exists()) == []


# ---- damaged inputs: refused by name, never a crash or a wrong answer ----

def test_a_damaged_graph_offset_fails_info_by_name(deepwell_cli, small):
    g = small / "g.dwg"
    info = dw(deepwell_cli, "graph", "info", g)
    assert info.returncode == 0, info
    img = bytearray(g.read_bytes())
    at = int(re.search(r"offsets @(\d+)", info.stdout).group(1)) + 8 * 512 + 4
    img[at] ^= 0x10  # offsets[512] + 2^36: its walk would leave the file
    g.write_bytes(bytes(img))
    for args in (["graph", "info", g], ["graph", "info", g, "--check"]):
        r = dw(deepwell_cli, *args)
        assert 0 < r.returncode < 124, r  # an error, not a signal
        assert "offsets section" in r.stderr, r.stderr


def test_a_damaged_truth_sets_k_is_refused_before_anything_is_allocated(deepwell_cli, tmp_path):
    d = tmp_path
    assert dw(deepwell_cli, "vectors", "gen", d / "b.u8bin", "--count", 2000, "--dim", 16).returncode == 0
    assert dw(deepwell_cli, "vectors", "gen", d / "q.u8bin", "--count", 20, "--dim", 16, "--stream", 1).returncode == 0
    assert dw(deepwell_cli, "vectors", "build", d / "b.u8bin", d / "i.dwv", "--cpu").returncode == 0
    made = dw(deepwell_cli, "vectors", "truth", d / "b.u8bin", d / "q.u8bin", d / "t.bin", "--k", 5)
    assert made.returncode == 0, made
    truth = bytearray((d / "t.bin").read_bytes())
    for k in (7, 5 + (1 << 27)):
        truth[4:8] = k.to_bytes(4, "little")
        (d / "bad.bin").write_bytes(bytes(truth))
        r = dw(deepwell_cli, "vectors", "search", d / "i.dwv", d / "q.u8bin", "--truth", d / "bad.bin", "--cpu",
               "--k", 5)
        assert 0 < r.returncode < 124, r
        assert "damaged or not a truth set" in r.stderr, r.stderr
