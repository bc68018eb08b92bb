"""Reading a wheel's Python sources by range requests into a sparse file (kimi_dflash_lab.wheels).

Fast tests serve a locally built zip through the same `fetch(url, start, end)` interface the HTTP reader has;
the slow one reads a real vLLM wheel from the package index and checks it against pip's full download when that
is cached.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from kimi_dflash.core.wheels import find_cached_wheel
from kimi_dflash_lab.wheels import released_wheels, sparse_wheel


@pytest.mark.slow
def test_a_real_wheel_read_by_ranges_holds_the_same_sources_as_the_full_wheel(tmp_path: Path) -> None:
    links = released_wheels("0.20.2")
    sparse = sparse_wheel(links["0.20.2"], tmp_path)
    full = find_cached_wheel("0.20.2")
    with zipfile.ZipFile(sparse) as archive:
        names = [n for n in archive.namelist() if n.endswith(".py")]
        assert len(names) > 1500
        sample = {n: archive.read(n) for n in names}
    if full is None:
        pytest.skip("no full 0.20.2 wheel cached to compare with (the CRC of every member was checked)")
    with zipfile.ZipFile(full) as archive:
        assert all(archive.read(n) == data for n, data in sample.items())
