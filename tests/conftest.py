import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shm_guard():
    """Fails the test if it leaves a demidcd shared-memory segment in /dev/shm."""
    def ours():
        try:
            return {f for f in os.listdir("/dev/shm") if f.startswith("demidcd")}
        except FileNotFoundError:
            return set()
    before = ours()
    yield
    left = ours() - before
    assert not left, f"leaked shared memory: {sorted(left)[:3]}"
