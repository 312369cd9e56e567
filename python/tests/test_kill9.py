"""kill -9 of a process writing a key-value store and checkpoints, then a
fresh process recovers and checks the file (bench/probes/kill9-durability;
CPU clients here, the GPU in scripts/gpu-check)."""
import json
import os
import subprocess
import sys

import pytest

PROBE = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "probes", "kill9-durability")


@pytest.mark.parametrize("kind", ["kv", "ckpt"])
def test_a_killed_writer_leaves_a_committed_state(tmp_path, kind):
    out = tmp_path / "kill9.json"
    r = subprocess.run([sys.executable, PROBE, "--device", "cpu", "--kinds", kind, "--trials", "2", "--dir",
                        str(tmp_path), "--max-delay", "4", "--out", str(out)],
                       capture_output=True, text=True, timeout=240)
    assert out.exists(), r.stdout + r.stderr
    summary = json.loads(out.read_text())
    assert summary["failed"] == 0, r.stdout + r.stderr
    assert summary["passed"] == 2
