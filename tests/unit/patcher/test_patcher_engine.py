"""The patcher engine's guarantees, on a small synthetic tree and a synthetic registry.

Fast: no vLLM needed. The real registry against real vLLM wheels is in test_patcher_versions.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kimi_dflash.core.paths import cache_root
from kimi_dflash.patcher import engine, txn
from kimi_dflash.patcher.model import (
    Edit,
    NotWritable,
    Patch,
    PatcherError,
    Probe,
    Status,
    UnrecognisedSource,
)
from kimi_dflash.patcher.status import (
    add_marker,
    find_markers,
    remove_marker,
    sha256_text,
)

MOD = "pkg/mod.py"
OTHER = "pkg/other.py"

OLD_A = "def answer():\n    return 41\n"
NEW_A = "def answer():\n    # kimi-dflash(demo-fix): the right answer\n    return 42\n"
OLD_B = "LIMIT = 8\n"
NEW_B = "LIMIT = 16  # kimi-dflash(demo-fix)\n"
OLD_C = "def gate(x):\n    assert x, 'strict'\n    return x\n"
NEW_C = "def gate(x):\n    return x  # kimi-dflash(demo-gate)\n"

DEMO_FIX = Patch(
    id="demo-fix",
    title="demo fix across two files",
    why="test",
    upstream_pr="#1",
    upstream_since="9.9",
    retired_when=(Probe(MOD, r"^UPSTREAM_FIXED = True$", "UPSTREAM_FIXED flag"),),
    edits=(Edit(MOD, OLD_A, NEW_A), Edit(OTHER, OLD_B, NEW_B)),
)
DEMO_GATE = Patch(
    id="demo-gate",
    title="demo gate",
    why="test",
    upstream_pr="#2",
    upstream_since="9.9",
    retired_when=(Probe(OTHER, r"^def gate\(x\):\n    return x$", "gate without assert"),),
    edits=(Edit(OTHER, OLD_C, NEW_C),),
)
REGISTRY = (DEMO_FIX, DEMO_GATE)


def make_tree(tmp_path: Path, mod_tail: str = "\n") -> Path:
    root = tmp_path / "vllm"
    (root / "v1").mkdir(parents=True)
    (root / "pkg").mkdir()
    (root / "__init__.py").write_text("")
    (root / "_version.py").write_text("__version__ = version = '0.0.1'\n")
    (root / MOD).write_text("import os\n\n" + OLD_A + "\nVALUE = 1" + mod_tail)
    (root / OTHER).write_text("X = 1\n" + OLD_B + "\n\n" + OLD_C)
    return root


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def statuses(root: Path) -> dict[str, Status]:
    table = engine.status_table(root, registry=REGISTRY)
    return {s.patch.id: s.status for s in table.states}


def test_pending_tree_is_reported_pending_with_exit_1(tmp_path):
    root = make_tree(tmp_path)
    table = engine.status_table(root, registry=REGISTRY)
    assert statuses(root) == {"demo-fix": Status.PENDING, "demo-gate": Status.PENDING}
    assert table.exit_code == 1
    assert table.version == "0.0.1"


def test_apply_patches_every_file_compiles_and_marks(tmp_path):
    root = make_tree(tmp_path)
    original_other = (root / OTHER).read_text()
    result = engine.apply_pending(root, registry=REGISTRY)
    assert set(result.changed_files) == {MOD, OTHER}
    assert statuses(root) == {"demo-fix": Status.APPLIED, "demo-gate": Status.APPLIED}
    assert result.after.exit_code == 0
    spec = importlib.util.spec_from_file_location("demo_patched_mod", root / MOD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the patched file is a valid, importable module
    assert module.answer() == 42
    markers = find_markers((root / OTHER).read_text())
    assert [m.patch_id for m in markers] == ["demo-fix", "demo-gate"]
    # The first marker records the file as it was before any patch.
    assert markers[0].sha256_before == sha256_text(original_other)


def test_apply_twice_changes_no_byte(tmp_path):
    root = make_tree(tmp_path)
    engine.apply_pending(root, registry=REGISTRY)
    after_first = snapshot(root)
    second = engine.apply_pending(root, registry=REGISTRY)
    assert second.changed_files == ()
    assert snapshot(root) == after_first


@pytest.mark.parametrize("mod_tail", ["\n", ""], ids=["newline-at-eof", "no-newline-at-eof"])
def test_revert_restores_byte_identical_tree(tmp_path, mod_tail):
    root = make_tree(tmp_path, mod_tail)
    before = snapshot(root)
    engine.apply_pending(root, registry=REGISTRY)
    assert snapshot(root) != before
    result = engine.revert_applied(root, registry=REGISTRY)
    assert snapshot(root) == before
    assert {s.status for s in result.after.states} == {Status.PENDING}


def test_retired_patch_is_never_applied(tmp_path):
    root = make_tree(tmp_path)
    with (root / MOD).open("a") as handle:
        handle.write("UPSTREAM_FIXED = True\n")
    table = engine.status_table(root, registry=REGISTRY)
    state = table.by_id()["demo-fix"]
    assert state.status is Status.RETIRED
    assert "#1" in state.detail
    engine.apply_pending(root, registry=REGISTRY)
    assert OLD_A in (root / MOD).read_text()  # untouched
    assert statuses(root)["demo-gate"] is Status.APPLIED


def test_tampered_anchor_is_unrecognised_and_nothing_is_written(tmp_path):
    root = make_tree(tmp_path)
    path = root / OTHER
    path.write_text(path.read_text().replace("LIMIT = 8", "LIMIT = 9"))
    before = snapshot(root)
    table = engine.status_table(root, registry=REGISTRY)
    state = table.by_id()["demo-fix"]
    assert state.status is Status.UNRECOGNISED
    assert table.exit_code == 2
    assert any("vllm/pkg/other.py" in p and "LIMIT = 8" in p for p in state.problems)
    assert any("UPSTREAM_FIXED flag" in p for p in state.problems)
    # demo-gate alone would be fine, but an unrecognised tree is refused as a whole.
    with pytest.raises(UnrecognisedSource) as info:
        engine.apply_pending(root, registry=REGISTRY)
    assert info.value.exit_code == 2
    assert snapshot(root) == before


def test_duplicated_anchor_is_unrecognised(tmp_path):
    root = make_tree(tmp_path)
    with (root / MOD).open("a") as handle:
        handle.write("\n" + OLD_A.replace("answer", "answer"))
    assert statuses(root)["demo-fix"] is Status.UNRECOGNISED


def test_patched_code_edited_after_apply_refuses_revert(tmp_path):
    root = make_tree(tmp_path)
    engine.apply_pending(root, registry=REGISTRY)
    path = root / MOD
    path.write_text(path.read_text().replace("VALUE = 1", "VALUE = 2"))
    before = snapshot(root)
    with pytest.raises(UnrecognisedSource, match="changed after it was patched"):
        engine.revert_applied(root, registry=REGISTRY)
    assert snapshot(root) == before


def test_failure_midway_through_renames_restores_every_file(tmp_path, monkeypatch):
    root = make_tree(tmp_path)
    before = snapshot(root)
    real_replace = os.replace
    calls = {"n": 0}

    def flaky_replace(src, dst):
        calls["n"] += 1
        if calls["n"] == 2:  # the first file is already in place when the second fails
            raise OSError(5, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(txn.os, "replace", flaky_replace)
    with pytest.raises(PatcherError, match="restored"):
        engine.apply_pending(root, registry=REGISTRY)
    assert calls["n"] >= 2
    assert snapshot(root) == before  # also proves no temporary file was left behind


def test_patch_that_would_not_compile_writes_nothing(tmp_path):
    broken = Patch(
        id="broken",
        title="t",
        why="t",
        upstream_pr="#3",
        upstream_since="9.9",
        retired_when=(Probe(MOD, r"^NEVER$", "never"),),
        edits=(Edit(MOD, OLD_A, "def answer(:\n"),),
    )
    root = make_tree(tmp_path)
    before = snapshot(root)
    with pytest.raises(PatcherError, match="would not compile"):
        engine.apply_pending(root, registry=(broken,))
    assert snapshot(root) == before


def test_second_patcher_is_locked_out(tmp_path):
    root = make_tree(tmp_path)
    before = snapshot(root)
    with txn.patcher_lock(root), pytest.raises(PatcherError, match="another patcher"):
        engine.apply_pending(root, registry=REGISTRY)
    assert snapshot(root) == before
    engine.apply_pending(root, registry=REGISTRY)  # free again once released


def test_lock_is_held_across_processes(tmp_path):
    root = make_tree(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from pathlib import Path;"
                "from kimi_dflash.patcher.txn import patcher_lock\n"
                "with patcher_lock(Path(sys.argv[1])):\n"
                "    print('locked', flush=True); time.sleep(30)"
            ),
            str(root),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(PatcherError, match="another patcher"):
            engine.apply_pending(root, registry=REGISTRY)
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_core_dir_lock_in_the_users_cache_never_the_shared_temp_dir(tmp_path: Path) -> None:
    """Issue 31 S8 (a regression): the lock went back to a predictable name in /tmp, opened following symlinks,
    0644, so another user could plant it or hold it. It is this user's (0600, in their cache); a lock file another
    user planted there (nobody's, as root here), or a symlink there, is refused and never written through."""
    root = make_tree(tmp_path)
    lock = txn.lock_path(root)
    assert lock.parent == cache_root() / "run" and lock.parent != Path(tempfile.gettempdir())  # HOME may be in /tmp
    engine.apply_pending(root, registry=REGISTRY)
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600 and lock.stat().st_uid == os.geteuid()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for plant in ("symlink", "another user's file"):
        lock.unlink()
        if plant == "symlink":
            lock.symlink_to(victim)
        else:
            lock.touch(mode=0o666)
            os.chown(lock, 65534, 65534)
        with pytest.raises(PatcherError, match="the lock file is"):
            engine.revert_applied(root, registry=REGISTRY)
        assert victim.read_text() == "precious\n"
    lock.unlink()
    engine.revert_applied(root, registry=REGISTRY)


def test_read_only_tree_names_the_alternatives(tmp_path, monkeypatch):
    root = make_tree(tmp_path)
    before = snapshot(root)

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")  # EROFS, what a read-only image gives

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(NotWritable) as info:
        engine.apply_pending(root, registry=REGISTRY)
    message = str(info.value)
    assert "plugin" in message and "--vllm-root" in message and "PYTHONPATH" in message
    assert info.value.exit_code == 3
    assert snapshot(root) == before


def test_really_unwritable_tree(tmp_path):
    """A directory even root cannot write to (immutable attribute), as on a read-only image."""
    root = make_tree(tmp_path)
    package_dir = root / "pkg"
    if shutil.which("chattr") is None:
        pytest.skip("chattr not available")
    locked = subprocess.run(["chattr", "+i", str(package_dir)], capture_output=True, check=False)
    if locked.returncode != 0:
        pytest.skip(f"cannot make a directory immutable here: {locked.stderr!r}")
    try:
        before = snapshot(root)
        with pytest.raises(NotWritable) as info:
            engine.apply_pending(root, registry=REGISTRY)
        assert "read-only" in str(info.value) and "plugin" in str(info.value)
        assert snapshot(root) == before
    finally:
        subprocess.run(["chattr", "-i", str(package_dir)], check=True)


def test_diff_shows_pending_then_applied_changes(tmp_path):
    root = make_tree(tmp_path)
    pending = engine.diff(root, registry=REGISTRY)
    assert "# pending" in pending and "-    return 41" in pending and "+    return 42" in pending
    engine.apply_pending(root, registry=REGISTRY)
    applied = engine.diff(root, registry=REGISTRY)
    assert "# applied" in applied and "+    return 42" in applied
    assert "# pending" not in applied


def test_only_selects_patches_and_rejects_unknown_ids(tmp_path):
    root = make_tree(tmp_path)
    engine.apply_pending(root, only=["demo-gate"], registry=REGISTRY)
    assert statuses(root) == {"demo-fix": Status.PENDING, "demo-gate": Status.APPLIED}
    with pytest.raises(PatcherError, match="unknown patch id"):
        engine.status_table(root, only=["nope"], registry=REGISTRY)


def test_not_a_vllm_tree_is_refused(tmp_path):
    with pytest.raises(UnrecognisedSource, match="not a vLLM source tree"):
        engine.status_table(tmp_path, registry=REGISTRY)


def test_parent_of_the_package_is_accepted(tmp_path):
    root = make_tree(tmp_path)
    assert engine.resolve_vllm_root(tmp_path) == root.resolve()


def test_text_table_is_aligned_and_json_is_complete(tmp_path):
    root = make_tree(tmp_path)
    table = engine.status_table(root, registry=REGISTRY)
    lines = table.to_text().splitlines()
    header, first, second = lines[1], lines[2], lines[3]
    assert header.index("status") == first.index("pending") == second.index("pending")
    payload = table.to_json()
    assert payload["exit_code"] == 1
    assert [p["id"] for p in payload["patches"]] == ["demo-fix", "demo-gate"]  # type: ignore[index]


def test_marker_round_trip_without_trailing_newline():
    original = "x = 1"  # no newline at the end
    marked = add_marker(original, original, "demo-fix")
    assert marked.endswith("\n") and find_markers(marked)[0].newline_added
    restored, marker = remove_marker(marked, "demo-fix")
    assert restored == original and marker.sha256_before == sha256_text(original)


def test_registry_edits_read_from_their_diffs() -> None:
    # Each hunk of data/patches/<id>.diff is one edit: a blank line is context, headers name the file.
    from kimi_dflash.patcher.registry import PATCHES

    counts = {"target-mla-causal": 1, "dflash-assert-gate": 1, "triton-noncausal": 9, "mla-swa-assert": 1}
    assert {p.id: len(p.edits) for p in PATCHES if p.edits} == counts
    for patch in PATCHES:
        for edit in patch.edits:
            assert edit.old != edit.new and edit.old.endswith("\n") and edit.new.endswith("\n")
            assert f"kimi-dflash({patch.id})" in edit.new and f"kimi-dflash({patch.id})" not in edit.old
    triton = next(p for p in PATCHES if p.id == "triton-noncausal")
    assert triton.files == ("v1/attention/ops/triton_unified_attention.py", "v1/attention/backends/triton_attn.py")
    assert triton.edits[-1].old == "            causal=True,\n            alibi_slopes=self.alibi_slopes,\n"
    assert "\n\n    # iterate through tiles" in triton.edits[1].old  # the blank context line
