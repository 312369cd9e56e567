"""bench/summarize.py: JSON lines in, the issue's result object out."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import summarize  # noqa: E402


def line(benchmark, config, metrics=None, ratios=None, **top):
    return {"benchmark": benchmark, "commit": "c0ffee", "device": "NVIDIA H100", "config": config,
            "metrics": metrics or {}, "ratios": ratios or {}, "ceilings": {"h2d_memcpy_gbps": 50.0}, **top}


LINES = [
    line("array", {"mode": "all-hit"}, {"elem_reads_per_s": 6e9, "page_gbps": 2000.0},
         {"hit_elem_vs_hbm_read": 0.017, "hit_page_vs_hbm_read": 0.66}),
    line("array", {"mode": "all-miss", "location": "hostmem", "path": "direct", "page_size": 4096},
         {"miops": 12.0, "gbps": 46.5, "controller_cores": 0.3}, {"miss4k_hostmem_direct_vs_h2d": 0.93}),
    line("array", {"mode": "all-miss", "location": "hostmem", "path": "controller", "page_size": 4096},
         {"miops": 6.0, "gbps": 22.5, "controller_cores": 9.0, "controller_cores_per_10gbps": 3.75},
         {"miss4k_hostmem_ctrl_vs_h2d": 0.45}),
    line("array", {"mode": "all-miss", "location": "hostmem", "path": "direct", "page_size": 65536},
         {"miops": 0.7, "gbps": 45.0}, {"miss65536_hostmem_direct_vs_h2d": 0.9}),
    line("array", {"mode": "all-miss", "location": "hostmem", "path": "direct", "page_size": 512},
         {"miops": 34.0, "gbps": 17.0}, {"miss512_hostmem_direct_vs_h2d": 0.3}),
    line("block", {"location": "file", "direct": True, "block": 4096, "op": "read"}, {"iops": 9e4},
         {"vs_uring_loop_same_cores": 0.98}, clients="gpu", baselines={"uring_loop_same_cores": {"iops": 9.2e4}}),
    line("gather", {"location": "pagecache", "method": "tiling", "path": "cpu"},
         {"dependent_gbps": 5.0, "bulk_gbps": 20.0, "bulk_cpu_cores": 8.0}),
    line("gather", {"location": "pagecache", "method": "deepwell", "path": "direct"},
         {"dependent_gbps": 20.0, "bulk_gbps": 40.0, "bulk_cpu_cores": 0.1, "bad_words": 0,
          "same_row_ids_as_tiling": True}, {"dependent_vs_tiling": 4.0, "bulk_vs_tiling": 2.0},
         baselines={"tiling_best": {"bulk_gbps": 20.0, "bulk_cpu_cores": 8.0, "bulk_config": "8 threads x 32 rows"}}),
]


class Summarize(unittest.TestCase):
    def test_maps_lines_to_the_issue_keys(self):
        s = summarize.summarize(LINES, "abc123", {"suites": ["array"]})
        self.assertEqual(s["commit"], "abc123")
        self.assertEqual(s["device"], "NVIDIA H100")
        self.assertEqual(s["ceilings"]["h2d_memcpy_gbps"], 50.0)
        self.assertEqual(s["ratios"]["hit_elem_vs_hbm_read"], 0.017)
        self.assertAlmostEqual(s["ratios"]["miss4k_hostmem_direct_vs_h2d"], 0.93)
        self.assertAlmostEqual(s["ratios"]["miss4k_hostmem_ctrl_vs_h2d"], 0.45)
        self.assertAlmostEqual(s["ratios"]["miss64k_hostmem_direct_vs_h2d"], 0.9)
        self.assertEqual(s["ratios"]["miss4k_odirect_vs_uring"], 0.98)
        self.assertEqual(s["ratios"]["dependent_gather_vs_tiling"], 4.0)
        self.assertEqual(s["ratios"]["bulk_gather_vs_tiling"], 2.0)
        self.assertEqual(s["metrics"]["miss512_direct_miops"], 34.0)
        self.assertEqual(s["metrics"]["controller_cores_per_10gbps"], 3.75)
        self.assertEqual(s["baselines"]["tiling_pagecache_bulk_cpu_cores"], 8.0)
        self.assertEqual(s["baselines"]["tiling_pagecache_bulk_config"], "8 threads x 32 rows")
        self.assertEqual(len(s["runs"]), len(LINES))
        for key in ("commit", "device", "config", "metrics", "ceilings", "baselines", "ratios"):
            self.assertIn(key, s)

    def test_goals_are_judged_from_measured_values_only(self):
        s = summarize.summarize(LINES)
        self.assertIs(s["goals"]["miss4k_hostmem_direct_vs_h2d"]["met"], True)
        self.assertIs(s["goals"]["miss4k_hostmem_ctrl_vs_h2d"]["met"], False)
        self.assertIs(s["goals"]["controller_cores_per_10gbps"]["met"], False)  # <= goal
        self.assertIs(s["goals"]["dependent_gather_vs_tiling"]["met"], True)
        # No measurement: no value, listed as missing, not judged.
        self.assertIsNone(s["goals"]["miss512_ctrl_miops"]["value"])
        self.assertIsNone(s["goals"]["miss512_ctrl_miops"]["met"])
        self.assertIn("miss512_ctrl_miops", s["missing"])
        self.assertIn("miss4k_pagecache_ctrl_vs_h2d", s["missing"])
        self.assertNotIn("miss512_ctrl_miops", s["metrics"])

    def test_the_last_matching_line_wins(self):
        later = line("array", {"mode": "all-hit"}, {}, {"hit_elem_vs_hbm_read": 0.5, "hit_page_vs_hbm_read": 0.7})
        s = summarize.summarize(LINES + [later])
        self.assertEqual(s["ratios"]["hit_elem_vs_hbm_read"], 0.5)

    def test_failures_are_reported(self):
        bad = line("gather", {"location": "hostmem", "method": "deepwell", "path": "controller"},
                   {"bad_words": 3, "same_row_ids_as_tiling": False})
        failed = line("array", {"mode": "all-miss", "location": "pagecache", "path": "direct", "page_size": 4096},
                      {"failed": 2})
        s = summarize.summarize(LINES + [bad, failed])
        self.assertEqual(len(s["failures"]), 3)
        self.assertTrue(any("row ids differ" in f for f in s["failures"]))
        self.assertEqual(summarize.summarize(LINES)["failures"], [])

    def test_bad_input_names_the_line(self):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write(json.dumps(LINES[0]) + "\n{not json\n")
        try:
            with self.assertRaisesRegex(ValueError, r":2: not a JSON line"):
                summarize.load_lines([f.name])
            self.assertEqual(summarize.main([f.name]), 2)
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()


class WritePathKeys(unittest.TestCase):
    def test_mixed_and_write_keys_come_from_their_lines(self):
        lines = [
            line("mixed", {"location": "pagecache", "mode": "elem", "writer_pct": 33}, ratios={"vs_read_only": 0.4},
                 clients="gpu"),
            line("mixed", {"location": "pagecache", "mode": "elem", "writer_pct": 33}, ratios={"vs_read_only": 0.9},
                 clients="cpu"),
            line("mixed", {"location": "hostmem", "mode": "page", "writer_pct": 10}, ratios={"vs_read_only": 0.8},
                 clients="gpu"),
            line("block", {"location": "file", "direct": False, "block": 4096, "op": "write"},
                 ratios={"vs_uring_loop_same_cores": 0.85}, clients="gpu"),
        ]
        out = summarize.summarize(lines)
        self.assertEqual(out["ratios"]["mixed33_vs_read_only"], 0.4)  # the GPU line, not the CPU one
        self.assertEqual(out["ratios"]["mixed33_pagecache_elem_cpu_vs_read_only"], 0.9)
        self.assertEqual(out["ratios"]["mixed10_hostmem_page_vs_read_only"], 0.8)
        self.assertEqual(out["ratios"]["writeback_pagecache_vs_uring_write"], 0.85)
        self.assertNotIn("writeback_odirect_vs_uring_write", out["ratios"])
        self.assertIn("writeback_odirect_vs_uring_write", out["missing"])
        self.assertTrue(out["goals"]["writeback_pagecache_vs_uring_write"]["met"])
        self.assertFalse(out["goals"]["mixed33_vs_read_only"]["met"])
