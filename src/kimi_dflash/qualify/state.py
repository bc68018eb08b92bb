"""OUT/state.json: the qualify run's state (runs.state); a resume must match its signature."""

from __future__ import annotations

from kimi_dflash.documents import Model
from kimi_dflash.qualify.plan import QualifyPlan
from kimi_dflash.runs.state import RunState

STATE_FILE = "state.json"
LOCK_FILE = "qualify.lock"  # held by the run using OUT (core.dir_lock); never archived
SCHEMA = "kimi-dflash/qualify-state"


class QualifySignature(Model):
    """What a run qualifies: a resume with anything else would mix two runs."""

    config: str = ""
    config_sha256: str = ""  # the config file's text is not kept: it may hold API_KEY
    overrides: dict[str, str] = {}
    candidate_env: list[tuple[str, str]] = []
    k_values: list[int] = []
    sessions: list[int] = []
    bench_args: list[str] = []
    server_env: list[tuple[str, str]] = []
    projection: list[float] = []
    graphs: list[tuple[str, str]] = []
    candidates: dict[str, str] = {}  # a shoot-out's candidate configs: path -> SHA-256 of the text
    amplitudes: list[tuple[str, float, bool]] = []  # the drafter RoPE amplitudes served (another vLLM: others)


class QualifyState(RunState):
    SCHEMA = SCHEMA
    WHAT = "qualify state file"
    FILE, LOCK, RUN = STATE_FILE, LOCK_FILE, "qualify run"
    signature: QualifySignature
    plan: QualifyPlan  # this invocation's (equal signatures plan the same steps)
