"""Issue 8, defect 5 on a real vLLM CPU server: observe mode records the MLA decode query's amax, and the
calibrator reports whether vLLM's q_scale of 1.0 would clip it with an FP8 query.

The CPU build runs MLA decode through `impl.forward_mqa` with the query unquantised (BF16 cache), which is the
hook point the plugin uses there; the FP8-query hook point (`_decode_concat_quant_fp8_op`) only runs on GPUs
and is unit-tested in test_kvscale_hook_ops.py. One server, about a minute.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from kimi_dflash.kvscale.local_server import start_server
from kimi_dflash.paths import REPO_ROOT, cache_root

from conftest import free_port

pytestmark = [pytest.mark.server, pytest.mark.timeout(1200)]


def test_observe_records_the_decode_query_and_calibration_reports_clipping(tmp_path) -> None:
    pytest.importorskip("vllm")
    from kimi_dflash.kvscale.scales_file import read_observe_dumps
    from kimi_dflash.kvscale.tiny_mla import ensure_tiny_mla_model

    model = ensure_tiny_mla_model(cache_root() / "kvscale" / "tiny-mla-2l-gain1", latent_gain=1.0, num_layers=2)
    observe_dir = tmp_path / "observe"
    server = start_server(model, free_port(), tmp_path / "server.log",
                          env={"KIMI_DFLASH_KV_SCALE_MODE": "observe", "KIMI_DFLASH_KV_OBSERVE_DIR": str(observe_dir),
                               "KIMI_DFLASH_KV_OBSERVE_INTERVAL": "0.5"},
                          args=["--max-model-len", "1024", "--dtype", "bfloat16"], timeout=600)
    try:
        out = tmp_path / "kv_scales.json"
        done = subprocess.run([sys.executable, str(REPO_ROOT / "payload" / "calibrate_kv_scales.py"), "--server",
                               server.base_url, "--observe-dir", str(observe_dir), "--out", str(out),
                               "--limit", "6", "--max-tokens", "16", "--concurrency", "2"],
                              capture_output=True, text=True, check=False, timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr
        layers = {}
        for dump in read_observe_dumps(observe_dir):
            layers.update(dump["layers"])
    finally:
        server.stop()
    assert len(layers) == 2
    for name, entry in layers.items():
        # Every decode step of every request went through forward_mqa: the query was seen and is finite.
        assert entry["q_calls"] > 0 and math.isfinite(entry["q_amax"]) and entry["q_amax"] > 0, (name, entry)
    import json

    query = json.loads(out.read_text())["decode_query"]
    assert query["q_scale_in_vllm"] == 1.0
    assert query["amax_range"][1] == max(entry["q_amax"] for entry in layers.values())
    assert set(query["clips_at_q_scale_1"]) == {"e4m3fn", "e4m3fnuz"}
    line = next(line for line in done.stdout.splitlines() if line.startswith("decode query"))
    print(line)  # what docs/fp8-kv.md quotes
    assert "q_scale is 1.0" in line
