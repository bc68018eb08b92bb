"""What the fast loop needs beyond the dev extra: a test that serves or fabricates the demo models needs the cpu
extra (vLLM's CPU build, torch, tokenizers, safetensors). A bare `pytest` in a venv with only `.[dev]` skips it."""

from importlib.util import find_spec

import pytest

CPU_EXTRA = ("vllm", "torch", "tokenizers", "safetensors")
has_cpu_extra = all(find_spec(name) is not None for name in CPU_EXTRA)
needs_cpu_extra = pytest.mark.skipif(not has_cpu_extra, reason="needs the cpu extra (launchers/setup-cpu.sh)")
