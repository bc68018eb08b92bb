"""The dry engine's child: vLLM's own start-up code for `vllm serve` argvs, nothing loaded, nothing served.

Run as `python -c <this file's text> REQUEST_JSON` in the Python that will serve (standard library at top level, like
runtime_child.py). REQUEST_JSON: {"plans": [{"argv": [...], "env": {...}}, ...] (plans of one DEVICE), "device": their
DEVICE, "fakes": path of platform_fakes.py, "meta_model": bool, "cuda_gpu": "H200" or "H100" (optional)}. Stages 1
and 2's imports run once per import process, a fork of this one under the environment of the first plan not judged
yet; every variable read through os.environ meanwhile is recorded, and each plan whose environment agrees on those is
judged in a fork of the import process (a fresh copy of it: vLLM's per-process caches, backend selection among them,
start empty for every plan), its own environment set there. Stages, each recorded as it passes:

1. for a rocm/cuda plan, a `vllm.platform_plugins` entry point (a throw-away *.dist-info directory on sys.path, which
   is all importlib.metadata needs) that, when vLLM resolves its platform, installs the simulated platform
   (platform_fakes.platform_plugin) unless vLLM's own probes find the plan's platform on this host; every fake is
   listed in the report. An entry point, because `import vllm` resolves the platform in some releases (0.26);
2. vLLM's serve argument parser on the argv;
3. `AsyncEngineArgs.from_cli_args(...).create_engine_config()` (model, speculative, cache, parallel, scheduler
   configs, the platform's check_and_update_config);
4. what vLLM chose: model runner, KV dtype, graph mode; the attention backend for the target (and the MLA prefill
   backend), and for the drafter through DFlash's own draft-config path (DFlashProposer._create_draft_vllm_config);
5. with "meta_model": the target model built on the meta device as tensor-parallel rank 0 (group size faked to the
   plan's TP), which is where the MoE method is chosen (and `--moe-backend` refused).

vLLM's own exception, if any, is the verdict. One marked JSON line per plan on stdout: {"index": its place in
"plans", "seconds": its fork's wall time, "report": ...}.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import os
import sys
import tempfile
import time
import traceback

MARKER = "KIMI_DFLASH_DRY_ENGINE "
SIMULATED = ("rocm", "cuda")  # plan DEVICEs platform_fakes.py can simulate
PLUGIN_MODULE = "kimi_dflash_dry_platform"
PLUGIN_NAME = "kimi_dflash_dry_platform"
PLUGIN_SOURCE = """\
import runpy
FAKES = runpy.run_path({fakes!r})
def plugin():
    return FAKES["platform_plugin"]({device!r}, {cuda_gpu!r})
"""


def _platform_name(qualname: str) -> str:
    """vLLM's platform class path -> the plan's DEVICE word (vllm.platforms.rocm.RocmPlatform -> rocm)."""
    module = qualname.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    return {"rocm": "rocm", "cuda": "cuda", "cpu": "cpu"}.get(module, module)


def _stage(report: dict, name: str) -> None:
    report["stages"].append(name)


def install_platform_plugin(request: dict, directory: str) -> None:
    """Register the simulated platform as a `vllm.platform_plugins` entry point: a module and a *.dist-info
    directory (METADATA + entry_points.txt) in `directory`, put first on sys.path. Must run before vLLM is
    imported."""
    source = PLUGIN_SOURCE.format(
        fakes=request["fakes"], device=request["device"], cuda_gpu=request.get("cuda_gpu") or "H200"
    )
    with open(os.path.join(directory, PLUGIN_MODULE + ".py"), "w", encoding="utf-8") as handle:
        handle.write(source)
    info = os.path.join(directory, PLUGIN_NAME + "-0.dist-info")
    os.mkdir(info)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as handle:
        handle.write(f"Metadata-Version: 2.1\nName: {PLUGIN_NAME}\nVersion: 0\n")
    with open(os.path.join(info, "entry_points.txt"), "w", encoding="utf-8") as handle:
        handle.write(f"[vllm.platform_plugins]\n{PLUGIN_NAME} = {PLUGIN_MODULE}:plugin\n")
    sys.path.insert(0, directory)
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed:  # an allowlist that does not name the plugin would skip it
        os.environ["VLLM_PLUGINS"] = f"{allowed},{PLUGIN_NAME}"


def dry_runs(request: dict) -> None:
    """Judge every plan of the request, each in a fork of an import process (vLLM's start-up code imported under the
    environment of the first plan not judged yet): one import for all plans whose environment agrees on every
    variable that import read; the rest get the next one. Prints one marked line per plan."""
    with tempfile.TemporaryDirectory(prefix="kimi-dflash-dry-plugin-") as directory:
        if request.get("device") in SIMULATED:
            install_platform_plugin(request, directory)
        base = dict(os.environ)
        # Smallest environments lead: a copy of the whole environment (dict(os.environ), at some imports) reads every
        # name present, so a lead without a plan's extra variables can still share its import with that plan.
        pending = sorted(range(len(request["plans"])), key=lambda i: len(request["plans"][i].get("env", {})))
        warm: list = []  # what the forks imported, which the next import process imports before its first fork
        while pending:
            outcome = _forked(lambda: _import_and_judge(request, pending, base, warm))  # noqa: B023 - run now
            warm = outcome.get("modules", warm)
            if "judged" not in outcome:  # the import process itself ended: its plans get what ended it
                for index in pending:
                    _emit(index, 0.0, {"error": outcome.get("error"), "stages": [], "not_run": True})
                return
            pending = [i for i in pending if i not in outcome["judged"]]


def _emit(index: int, seconds: float, report: dict) -> None:
    line = {"index": index, "seconds": round(seconds, 1), "report": report}
    sys.stdout.write("\n" + MARKER + json.dumps(line, default=str) + "\n")
    sys.stdout.flush()


def _environment(base: dict, plan: dict) -> dict:
    return {**base, **plan.get("env", {})}


def _switch_environment(environment: dict) -> None:
    """os.environ (and the C environment, through putenv) set to exactly `environment`."""
    for name in [name for name in os.environ if name not in environment]:
        del os.environ[name]
    for name, value in environment.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _import_and_judge(request: dict, pending: list, base: dict, warm: list) -> dict:
    """In the import process: vLLM's start-up code imported under the first pending plan's environment, every
    variable read through os.environ meanwhile recorded; each pending plan whose environment agrees with it on those
    variables judged in a fork (its own environment set there: what vLLM reads later, it reads from the plan's).
    The modules each fork imported are imported here too (the next forks find them), under the same recording, and
    so are those of an earlier import process's forks (`warm`). Returns the indices judged and the modules."""
    gc.disable()  # a short-lived process that builds much and frees little: collections would only cost time
    plans = request["plans"]
    imported_under = _environment(base, plans[pending[0]])
    _switch_environment(imported_under)
    read: set = set()
    judged = []
    with contextlib.ExitStack() as stack, _recording_reads(read):
        shared: dict = {"stages": [], "error": None, "simulated": []}
        imported = _import_start_up(request, shared, stack)
        if imported is not None:
            _import_quietly(warm)
        modules = dict.fromkeys(warm)
        for index in pending:
            environment = _environment(base, plans[index])
            if any(environment.get(name) != imported_under.get(name) for name in read):
                continue  # an environment this import did not see: the next import process judges it
            started = time.monotonic()
            report = copy.deepcopy(shared)
            if imported is not None:
                outcome = _forked(lambda: _judge_in(environment, request, report, plans[index]["argv"], imported))  # noqa: B023
                report = outcome.get("report", outcome)
            _emit(index, time.monotonic() - started, report)
            judged.append(index)
            if imported is not None:
                modules.update(dict.fromkeys(outcome.get("modules") or []))
                _import_quietly(outcome.get("modules") or [])
    return {"judged": judged, "modules": list(modules)}


def _judge_in(environment: dict, request: dict, report: dict, argv: list, imported) -> dict:
    """A fork's work: the plan's environment, the verdict, and the modules vLLM imported meanwhile (in order)."""
    _switch_environment(environment)
    before = set(sys.modules)
    report = _judge(request, report, list(argv), imported)
    return {"report": report, "modules": [name for name in list(sys.modules) if name not in before]}


def _import_quietly(modules: list) -> None:
    """Import what a plan's fork imported, so that the next forks start with it; one that fails here is left to
    them (it is imported there, in the plan's own context, as before)."""
    import importlib

    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


@contextlib.contextmanager
def _recording_reads(read: set):
    """Every os.environ / os.getenv read recorded in `read` (the variables an import depends on). A copy of the whole
    environment reads every name present: conservative, it can only split plans that could have shared."""
    environ = os.environ
    plain = type(environ)

    class Recording(plain):  # type: ignore[valid-type, misc]
        def __getitem__(self, name):
            read.add(name)
            return super().__getitem__(name)

    environ.__class__ = Recording
    try:
        yield read
    finally:
        environ.__class__ = plain


def _forked(work) -> dict:
    """`work()` in a fork of this process: what it returned, or what ended the fork."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    gc.freeze()  # what is here stays here: the fork's collector leaves it (and its pages) alone
    pid = os.fork()
    if pid == 0:  # the fork: work, hand the result over, and leave without running the parent's clean-up
        os.close(read_end)
        try:
            data = json.dumps(work(), default=str)
        except BaseException as error:  # noqa: BLE001 - whatever it is, the parent reports it
            data = json.dumps({"error": f"{type(error).__name__}: {error}", "stages": [], "not_run": True})
        with os.fdopen(write_end, "w", encoding="utf-8") as pipe:
            pipe.write(data)
        sys.stdout.flush()
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, encoding="utf-8") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if data:
        return json.loads(data)
    code = os.waitstatus_to_exitcode(status)
    return {"error": f"the dry engine's child exited with code {code}: no report", "stages": [], "not_run": True}


def _import_start_up(request: dict, report: dict, stack):
    """The platform (simulated or this host's) and vLLM's start-up code imported: what every plan of the request
    shares. None after an error (then in the report, as every plan's verdict)."""
    try:
        import vllm.platforms as platforms

        lenient = None
        device = request.get("device")
        plugin = sys.modules.get(PLUGIN_MODULE)
        if device in SIMULATED:
            platforms.current_platform  # noqa: B018 - resolves it (some releases already did, at import)
            plugin = sys.modules.get(PLUGIN_MODULE)
            if plugin is None:
                raise RuntimeError("vLLM did not load the dry engine's platform plugin (is VLLM_PLUGINS set?)")
            state = plugin.FAKES["STATE"]
            report["host_platform"] = state["host"]
            if state["platform"]:
                report["simulated"] = list(state["fakes"]) + plugin.FAKES["after_resolution"](device)
                lenient = plugin.FAKES["lenient_ops"]
                if plugin.FAKES["op_library_stubbed"]():
                    # A CUDA wheel: its real op library registers every op vLLM binds at import (fusion passes
                    # bind torch.ops._C.rotary_embedding ...); answer them all, from here on.
                    report["simulated"].append(stack.enter_context(lenient(everywhere=True)))
                    lenient = None
                _stage(report, f"simulated {device}")
        else:
            report["host_platform"] = _platform_name(platforms.resolve_current_platform_cls_qualname())
        report["platform"] = type(platforms.current_platform).__name__
        report["vllm_version"] = _vllm_version()
        import vllm.engine.arg_utils  # noqa: F401 - what each plan's fork then finds imported
        import vllm.utils.argparse_utils  # noqa: F401

        _make_arg_parser()
        _stage(report, "import")
        return (lenient,)
    except Exception as error:  # noqa: BLE001 - vLLM's own error is the verdict
        report["error"] = f"{type(error).__name__}: {error}"
        report["where"] = traceback.format_exc().strip().splitlines()[-30:]
        return None


def _make_arg_parser():
    try:  # 0.32
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # 0.26
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    return make_arg_parser


def _judge(request: dict, report: dict, argv: list, imported) -> dict:
    (lenient,) = imported
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        args = argv[argv.index("serve") + 1 :] if "serve" in argv else argv
        # In the fork: building the parser loads vLLM's general plugins, which read the plan's environment.
        parser = _make_arg_parser()(FlexibleArgumentParser(prog="vllm serve"))
        model, rest = (args[0], args[1:]) if args and not args[0].startswith("-") else (None, args)
        namespace = parser.parse_args(rest)
        if model is not None:
            namespace.model = model
        _stage(report, "parse")
        config = AsyncEngineArgs.from_cli_args(namespace).create_engine_config()
        _stage(report, "create_engine_config")
        _read_choices(report, config)
        _stage(report, "attention backends")
        if request.get("meta_model"):
            if lenient is None:
                _build_on_meta(report, config)
            else:
                with lenient() as fake:
                    report["simulated"].append(fake)
                    _build_on_meta(report, config)
    except SystemExit as exit_:  # argparse's error path; its message went to stderr
        report["error"] = f"vLLM's argument parser exited ({exit_.code})"
    except Exception as error:  # noqa: BLE001 - vLLM's own error is the verdict
        report["error"] = f"{type(error).__name__}: {error}"
        report["where"] = traceback.format_exc().strip().splitlines()[-30:]
    return report


def _vllm_version() -> str:
    try:
        from vllm import __version__

        return str(__version__)
    except ImportError:
        return "unknown"


def _read_choices(report: dict, config) -> None:
    from vllm.platforms import current_platform

    report["platform"] = type(current_platform).__name__
    report["runner"] = "V2" if config.use_v2_model_runner else "V1"
    report["dtype"] = str(config.model_config.dtype).replace("torch.", "")
    report["kv_cache_dtype"] = str(config.cache_config.cache_dtype)
    report["prefix_caching"] = bool(config.cache_config.enable_prefix_caching)
    report["enforce_eager"] = bool(config.model_config.enforce_eager)
    mode = getattr(config.compilation_config, "cudagraph_mode", None)
    report["cudagraph_mode"] = getattr(mode, "name", str(mode))
    report["use_mla"] = bool(config.model_config.use_mla)
    report["tensor_parallel_size"] = config.parallel_config.tensor_parallel_size
    spec = config.speculative_config
    report["speculative"] = None if spec is None else _speculative_report(spec)
    report["target_attention"] = _attention_backend(config, config.model_config)
    if config.model_config.use_mla:
        report["mla_prefill"] = _mla_prefill_backend(config)
    if spec is not None and spec.method == "dflash" and spec.draft_model_config is not None:
        report["drafter_attention"] = _attention_backend(_dflash_draft_config(config), spec.draft_model_config)


def _speculative_report(spec) -> dict[str, object]:
    """What vLLM resolved: method and k, and the rejection sampler when it is not the standard one (the synthetic
    sampler's rates as vLLM's own checks left them)."""
    found: dict[str, object] = {"method": spec.method, "k": spec.num_speculative_tokens}
    sampler = getattr(spec, "rejection_sample_method", "standard")
    if sampler != "standard":
        found["rejection_sample_method"] = sampler
        found["synthetic_acceptance_rates"] = getattr(spec, "synthetic_acceptance_rates", None)
    return found


def _attention_backend(config, model) -> str:
    """The backend vLLM's selector gives a model's attention layers (head size, dtype, KV dtype, MLA, causality)."""
    try:
        from vllm.config import set_current_vllm_config
        from vllm.v1.attention.selector import get_attn_backend

        with set_current_vllm_config(config):
            backend = get_attn_backend(
                model.get_head_size(), model.dtype, config.cache_config.cache_dtype, use_mla=model.use_mla
            )
        return backend.get_name()
    except Exception as error:  # noqa: BLE001 - reported as vLLM's error for this layer
        return f"error ({type(error).__name__}: {error})"


def _mla_prefill_backend(config) -> str:
    try:
        from vllm.config import set_current_vllm_config
        from vllm.v1.attention.backends.mla.prefill.selector import get_mla_prefill_backend

        with set_current_vllm_config(config):
            backend = get_mla_prefill_backend(config)
        return backend.get_name() if hasattr(backend, "get_name") else backend.__name__
    except Exception as error:  # noqa: BLE001
        return f"error ({type(error).__name__}: {error})"


def _dflash_draft_config(config):
    """DFlash's own draft VllmConfig: the drafter's attention backend (speculative_config.attention_backend or
    auto), non-causal when the drafter says so, the drafter's KV dtype. Called on a bare DFlashProposer so that no
    device buffer is allocated."""
    from vllm.model_executor.models.qwen3_dflash import dflash_has_any_non_causal
    from vllm.v1.spec_decode.dflash import DFlashProposer

    proposer = DFlashProposer.__new__(DFlashProposer)
    proposer.vllm_config = config
    proposer.speculative_config = config.speculative_config
    proposer.dflash_causal = not dflash_has_any_non_causal(config.speculative_config.draft_model_config.hf_config)
    return proposer._create_draft_vllm_config()


def _build_on_meta(report: dict, config) -> None:
    """Build the target (and the DFlash drafter, on DFlash's draft config) on the meta device as TP rank 0 of the
    plan's group, the way vLLM's model loader does before weights load; report the MoE method of the routed
    experts and the layers built."""
    import torch
    from vllm.distributed import parallel_state
    from vllm.platforms import current_platform

    tp = config.parallel_config.tensor_parallel_size
    _fake_tensor_parallel_group(parallel_state, tp)
    # Layers that place themselves on current_device() (KimiK25's vision tower) must land on meta too.
    current_platform.current_device = lambda: torch.device("meta")
    report["stand_ins"] = [
        f"parallel groups: tensor-parallel rank 0 of {tp}, no communication (construction only)",
        "current_platform.current_device() answers the meta device: nothing is allocated",
    ]
    report["target_model"] = _summarize(_initialize_on_meta(config, config.model_config))
    moe = report["target_model"].pop("moe_methods")
    report["moe_method"] = ", ".join(f"{name} x{count}" for name, count in sorted(moe.items())) or "no MoE layers"
    _stage(report, "target on meta")
    spec = config.speculative_config
    if spec is not None and spec.method == "dflash" and spec.draft_model_config is not None:
        drafter = _initialize_on_meta(_dflash_draft_config(config), spec.draft_model_config)
        report["drafter_model"] = _summarize(drafter)
        report["drafter_model"].pop("moe_methods")
        amplitudes = {m.mscale for m in drafter.modules() if isinstance(getattr(m, "mscale", None), float)}
        if len(amplitudes) == 1:  # the YaRN rotary embedding's cos/sin amplitude (issue 28)
            report["drafter_rope_amplitude"] = amplitudes.pop()
        _stage(report, "drafter on meta")


def _initialize_on_meta(config, model_config):
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    with set_current_vllm_config(config), set_default_torch_dtype(model_config.dtype), torch.device("meta"):
        return initialize_model(vllm_config=config, model_config=model_config)


def _summarize(model) -> dict:
    """The model class, its attention layers by kind, and the MoE method of each routed-experts layer (whatever
    module class holds it: any quant_method that is a FusedMoEMethodBase)."""
    from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase

    moe: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for module in model.modules():
        kind = type(module).__name__
        method = getattr(module, "quant_method", None)
        if isinstance(method, FusedMoEMethodBase):
            label = _moe_label(method)
            moe[label] = moe.get(label, 0) + 1
        if kind in ("MLAAttention", "Attention"):
            kinds[kind] = kinds.get(kind, 0) + 1
    if moe:
        kinds["MoE"] = sum(moe.values())
    return {"class": type(model).__name__, "layers": kinds, "moe_methods": moe}


def _moe_label(method) -> str:
    """The MoE method's class and, where it records one, the kernel backend its oracle selected."""
    for attr in ("wna16_backend", "wna16_moe_backend", "fp8_backend", "moe_backend", "backend"):
        backend = getattr(method, attr, None)
        if backend is not None and not callable(backend):
            return f"{type(method).__name__} [{getattr(backend, 'name', backend)}]"
    return type(method).__name__


class _FakeGroup:
    """What model construction asks a parallel group (GroupCoordinator and its ProcessGroup): its size and this
    rank (0). No communication happens while a model is built."""

    def __init__(self, size: int) -> None:
        self.world_size = size
        self.rank_in_group = 0
        self.rank = 0
        self.local_rank = 0
        self.ranks = list(range(size))
        self.device_group = self
        self.cpu_group = self
        self.first_rank = 0
        self.last_rank = size - 1
        self.is_first_rank = True
        self.is_last_rank = size == 1
        self.unique_name = f"dry:{size}"
        self.use_custom_op_call = False

    def size(self) -> int:  # torch.distributed ProcessGroup's API, for code that reads device_group.size()
        return self.world_size


def _fake_tensor_parallel_group(parallel_state, size: int) -> None:
    group = _FakeGroup(size)
    for name in ("_TP", "_PP", "_DCP", "_PCP", "_EP", "_DP", "_WORLD"):
        if hasattr(parallel_state, name):
            setattr(parallel_state, name, group if name in ("_TP", "_EP") else _FakeGroup(1))


if __name__ == "__main__":
    dry_runs(json.loads(sys.argv[1]))
