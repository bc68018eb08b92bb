"""qualify against hostile or careless configs and paths (issue 31): a config's API_KEY never lands in what the run
keeps or packs, and OUT is private (S1); an --out through another user's symlink is refused (S6); a shoot-out
candidate serving another target, or under a name that is not one, is refused at once (D2, D4). Steps are faked
(qualify_fakes): no server."""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest

from kimi_dflash.core import options
from kimi_dflash.core.errors import UserError
from kimi_dflash.qualify import cli as qualify_cli
from kimi_dflash.qualify import steps
from kimi_dflash.qualify.shootout import CandidateConfig, build_shootout
from qualify_fakes import fakes
from repo_paths import REPO_ROOT

CONFIGS = REPO_ROOT / "configs"
SECRET = "sk-issue31-do-not-store"
ARGS = ["--budget", "1s", "--no-plots"]


@pytest.fixture
def faked(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, fake in fakes().items():
        monkeypatch.setitem(steps.STEPS, name, fake)


def _qualify(*argv: str | Path) -> int:
    return options.run(qualify_cli, [str(a) for a in argv])


def _config(path: Path, *lines: str, extends: str = "demo-cpu.env") -> Path:
    path.write_text("\n".join([f"EXTENDS={CONFIGS / extends}", *lines]) + "\n", encoding="utf-8")
    return path


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# ------------------------------------------------------------------------------------------------------- S1


def test_the_configs_api_key_is_not_in_the_state_nor_the_archive_and_out_is_private(
    tmp_path: Path, faked: None, capsys: pytest.CaptureFixture[str]
) -> None:
    keyed = _config(tmp_path / "keyed.env", f"API_KEY={SECRET}")
    out = tmp_path / "out"
    assert _qualify(keyed, *ARGS, "--out", out) == 0
    archive = out.with_name("out.tar.gz")
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        packed = b"".join(tar.extractfile(m).read() for m in members.values())  # type: ignore[union-attr]
    assert "out/state.json" in members and SECRET.encode() not in packed
    for path in out.rglob("*"):
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in capsys.readouterr().err
    assert _mode(out) == 0o700 and _mode(out / "state.json") == 0o600 and _mode(out / "qualify.lock") == 0o600
    assert _mode(archive) == 0o600 and {m.mode for m in members.values()} == {0o600}

    # a resume still sees a changed config (by its digest) and refuses to mix two runs
    keyed.write_text(keyed.read_text() + "MAX_NUM_SEQS=2\n", encoding="utf-8")
    assert _qualify(keyed, *ARGS, "--out", out, "--resume") == 1
    assert "holds a qualify run with different config_sha256" in capsys.readouterr().err


def test_a_shoot_outs_candidate_keys_are_not_kept_either(tmp_path: Path, faked: None) -> None:
    reference = _config(tmp_path / "reference.env", f"API_KEY={SECRET}")
    candidate = _config(tmp_path / "eagle.env", f"API_KEY={SECRET}", extends="demo-cpu-eagle3.env")
    out = tmp_path / "out"
    _qualify(reference, "--candidates", candidate, *ARGS, "--out", out)
    state = (out / "state.json").read_bytes()
    assert str(candidate).encode() in state and SECRET.encode() not in state


# ------------------------------------------------------------------------------------------------------- S6


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root")
def test_an_out_under_another_users_symlinked_directory_or_in_their_directory_is_refused(
    tmp_path: Path, faked: None, capsys: pytest.CaptureFixture[str]
) -> None:
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    link = shared / "reports"
    link.symlink_to(private)
    os.lchown(link, 65534, 65534)
    assert _qualify(CONFIGS / "demo-cpu.env", *ARGS, "--out", link / "q") == 1
    assert f"goes through {link}, a symbolic link owned by nobody" in capsys.readouterr().err
    assert list(private.iterdir()) == []

    theirs = shared / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    assert _qualify(CONFIGS / "demo-cpu.env", *ARGS, "--out", theirs) == 1
    assert "belongs to nobody (uid 65534)" in capsys.readouterr().err
    assert list(theirs.iterdir()) == []


# ------------------------------------------------------------------------------------------------------- D2

CPU = {"DEVICE": "cpu", "SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": "4", "MAX_NUM_SEQS": "16",
       "FABRICATE_DEMO_MODELS": "kimi", "HOST": "127.0.0.1", "DTYPE": "auto"}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"MODEL_DIR": "/models/other"}, "MODEL_DIR=/models/other but the reference's is (unset)"),
        ({"MODEL_REPO": "org/other"}, "MODEL_REPO=org/other"),
        ({"PRESHARD_DIR": "/shards/tp8"}, "PRESHARD_DIR=/shards/tp8"),
        ({"DTYPE": "float16"}, "DTYPE=float16 but the reference's is auto"),
        ({"DEVICE": "rocm"}, "DEVICE=rocm but the reference's is cpu"),
        ({"HOST": "0.0.0.0"}, "HOST=0.0.0.0 but the reference's is 127.0.0.1"),
        ({"FABRICATE_DEMO_MODELS": "qwen3"}, "the demo's target=qwen3 but the reference's is kimi"),
        ({"EXTRA_VLLM_ARGS": "--tokenizer /tok"}, "--tokenizer in EXTRA_VLLM_ARGS=/tok but the reference's is (unset)"),
        ({"EXTRA_VLLM_ARGS": "--revision=abc"}, "--revision in EXTRA_VLLM_ARGS=abc"),
        ({"EXTRA_VLLM_ARGS": "--quantization fp8"}, "--quantization in EXTRA_VLLM_ARGS=fp8"),
        ({"EXTRA_VLLM_ARGS": "--tokenizer_rev v2"}, "--tokenizer-revision in EXTRA_VLLM_ARGS=v2"),
    ],
)
def test_a_candidate_that_serves_another_target_is_refused_naming_the_key(change: dict[str, str], says: str) -> None:
    candidate = CandidateConfig("other.env", CONFIGS / "other.env", {**CPU, **change})
    with pytest.raises(UserError, match="--candidates other.env: ") as refused:
        build_shootout(CPU, [candidate])
    assert says in str(refused.value) and "one target served on one box" in str(refused.value)


def test_a_candidate_of_the_same_target_with_another_drafter_is_accepted() -> None:
    eagle3 = {**CPU, "SPECULATIVE_METHOD": "eagle3", "NUM_SPECULATIVE_TOKENS": "3", "FABRICATE_DEMO_MODELS":
              "kimi-eagle3", "EXTRA_VLLM_ARGS": "--max-logprobs 5"}  # fmt: skip
    plan = build_shootout(CPU, [CandidateConfig("demo-cpu-eagle3.env", CONFIGS / "demo-cpu-eagle3.env", eagle3)])
    assert [c.name for c in plan.candidates] == ["demo-cpu-eagle3"]


def test_a_demo_config_of_another_model_or_another_api_key_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = CONFIGS / "demo-cpu.env"
    assert _qualify(reference, "--candidates", CONFIGS / "demo-qwen3-cpu.env", "--dry-run") == 1
    assert "demo-qwen3-cpu.env: the demo's target=qwen3 but the reference's is kimi" in capsys.readouterr().err
    keyed = _config(tmp_path / "keyed.env", f"API_KEY={SECRET}")
    assert _qualify(reference, "--candidates", keyed, "--dry-run") == 1
    err = capsys.readouterr().err
    assert "keyed.env: its API_KEY is not the reference's" in err and SECRET not in err


# ------------------------------------------------------------------------------------------------------- D4


def test_candidate_names_are_the_names_given_and_must_be_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = CONFIGS / "demo-cpu.env"
    dots = _config(tmp_path / "...env")
    assert _qualify(reference, "--candidates", dots, "--dry-run") == 1
    assert "its name '..' (the file name without .env) is its directory" in capsys.readouterr().err

    fast = tmp_path / "fast.env"
    fast.symlink_to(_config(tmp_path / "eagle3.env", extends="demo-cpu-eagle3.env"))
    assert _qualify(reference, "--candidates", f"{fast},{reference}", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "candidate fast (" in out and "candidate eagle3" not in out

    upper = _config(tmp_path / "DEMO-CPU.env")
    assert _qualify(reference, "--candidates", f"{upper},{reference}", "--dry-run") == 1
    assert "two candidates are named DEMO-CPU (case aside)" in capsys.readouterr().err

    fifo = tmp_path / "pipe.env"
    os.mkfifo(fifo)
    assert _qualify(reference, "--candidates", fifo, "--dry-run") == 1
    assert f"{fifo}: is a FIFO (named pipe), not a config file" in capsys.readouterr().err

    (tmp_path / "a,b.env").write_text("EXTENDS=demo-cpu.env\n")
    assert _qualify(reference, "--candidates", tmp_path / "a,b.env", "--dry-run") == 1
    assert "--candidates splits its list at commas" in capsys.readouterr().err
