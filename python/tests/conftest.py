import os

import numpy as np
import pytest


def pattern(rows: int, row_bytes: int, seed: int = 7) -> np.ndarray:
    """Deterministic bytes, different in every row (row r starts with r as int64 where it fits)."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(rows, row_bytes), dtype=np.uint8)
    if row_bytes >= 8:
        data[:, :8] = np.arange(rows, dtype=np.int64).view(np.uint8).reshape(rows, 8)
    return data


@pytest.fixture
def make_file(tmp_path):
    def make(rows: int, row_bytes: int, seed: int = 7, name: str = "data.bin"):
        data = pattern(rows, row_bytes, seed)
        path = os.path.join(tmp_path, name)
        data.tofile(path)
        return path, data
    return make
