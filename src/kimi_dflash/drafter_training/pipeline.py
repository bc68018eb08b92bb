"""train-drafter.sh: train a DFlash drafter matched to its target, in four phases of steps, checks first."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kimi_dflash.checkpoint import read_config
from kimi_dflash.config.shipped import shipped_configs_dir
from kimi_dflash.core.atomic_write import write_json_atomic, write_text_atomic
from kimi_dflash.core.paths import cache_root
from kimi_dflash.drafter_training import checks
from kimi_dflash.drafter_training.architecture import (
    DrafterArchitecture,
    check_against_target,
    load_architecture,
    specforge_draft_config,
)

if TYPE_CHECKING:
    from kimi_dflash.drafter_training.cli import TrainDrafterOptions

PHASES = ("setup", "regen", "train", "export")
SPECFORGE_VERSION = "0.2.0"
GIB = 1024**3


class PipelineError(Exception):
    """A check failed or an input is missing; the message names it and the fix."""


@dataclass
class Step:
    title: str
    inputs: list[object] = field(default_factory=list)  # paths or URLs, as --dry-run shows them
    outputs: list[object] = field(default_factory=list)
    command: str | None = None  # the shell command it runs (or the equivalent), for --dry-run
    action: Callable[[], None] | None = None
    phase: str = ""  # set by Pipeline.steps from the builder it came from


class Pipeline:
    def __init__(self, args: TrainDrafterOptions, say: Callable[[str], None] = print) -> None:
        self.args, self.say = args.with_profile(), say  # every option left out: the profile's value
        self.profile = args.profile
        self.work = Path(args.work_dir or cache_root() / "drafter-training" / self.profile).resolve()
        self.venv = cache_root() / "specforge" / "venv"
        self.prompts = self.work / "prompts.jsonl"
        self.regen_dir = self.work / "regen"
        self.specforge_dir = self.work / "specforge"  # SpecForge's inputs (these four) and its output
        self.run_config_path = self.specforge_dir / "run-config.json"
        self.draft_config_path = self.specforge_dir / "draft-config.json"
        self.train_data_path = self.specforge_dir / "train.jsonl"
        self.specforge_output = self.specforge_dir / "output"
        self.trained = self.work / "train" / "checkpoint.pt"  # the stand-in trainer's (standin.CHECKPOINT)
        self.export_dir = Path(args.export_dir or self.work / "export" / "drafter").resolve()
        self.configs = Path(args.configs_dir or shipped_configs_dir()).resolve()

    def demo_models(self):  # type: ignore[no-untyped-def]
        from kimi_dflash.demo import ensure_demo_models

        return ensure_demo_models(choice="kimi", progress=self.say)

    def drafter_config_path(self) -> Path:
        if self.args.drafter_config:
            return Path(self.args.drafter_config)
        if self.profile == "demo":
            return self.demo_models().drafter_dir / "config.json"
        return self.configs / "kimi-k2.6-dflash-draft.json"

    def target_dir(self) -> Path:
        return self.demo_models().target_dir if self.profile == "demo" else Path(self.args.target_dir)

    def architecture(self) -> DrafterArchitecture:
        return load_architecture(self.drafter_config_path())

    def base_serve_config(self) -> Path:
        name = "demo-cpu.env" if self.profile == "demo" else "production-fp8kv-matched.env"
        return self.configs / name

    def steps(self) -> list[Step]:
        skipped = {"setup": self.args.skip_setup, "regen": self.args.skip_regen}
        wanted = self.args.phase or [phase for phase in PHASES if not skipped.get(phase)]
        phases = [phase for phase in PHASES if phase in wanted]
        return [replace(step, phase=phase) for phase in phases for step in getattr(self, f"{phase}_steps")()]

    def specforge_bin(self) -> Path:
        return self.venv / "bin" / "specforge"

    def train_argv(self) -> list[str]:
        return [str(self.specforge_bin()), "train", "--config", str(self.run_config_path)]

    def setup_steps(self) -> list[Step]:
        prompts = [str(self.prompts)]
        if self.profile != "production":
            demo = f"python -m kimi_dflash.drafter_training.prompts --source demo --output {self.prompts}"
            shipped = ["kimi_dflash/data/kv_calibration_prompts.jsonl"]
            return [Step("prompts: the shipped demo prompt set", shipped, prompts, demo, self.demo_prompts)]
        venv, blend = [str(self.venv)], [str(self.args.perfectblend_dir)]
        install = f"{self.args.specforge_python} -m venv {self.venv} && {self.venv}/bin/pip install specforge=="
        specforge = f"SpecForge {SPECFORGE_VERSION} in its own venv (skipped when installed)"
        first_turns, read = "prompts: first user turn of every PerfectBlend conversation", self.perfectblend_argv()
        return [
            Step("check disk space (SpecForge venv: 11 GiB measured)", venv, action=self.check_venv_disk),
            Step(specforge, [], venv, install + SPECFORGE_VERSION, self.install_specforge),
            Step("check SpecForge's config schema knows every key generated", venv, action=self.check_schema),
            Step(first_turns, blend, prompts, shlex.join(read), lambda: self.run(read)),
        ]

    def regen_steps(self) -> list[Step]:
        a, url = self.args, self.args.base_url
        check = f"check the server answers /v1/models with {a.served_model}, and disk space"
        regen = f"regenerate every reply (max_tokens {a.max_tokens}, concurrency {a.concurrency}, temperature 0)"
        post = f"POST {url}/v1/chat/completions per prompt (return_token_ids)"
        written = [self.regen_dir / "part-*.jsonl", self.regen_dir / "failed.jsonl"]
        return [
            Step(check, [url], command=f"curl {url}/v1/models", action=self.check_regen),
            Step(regen, [self.prompts, url], written, post, self.regen),
        ]

    def train_steps(self) -> list[Step]:
        a, run_config, features = self.args, self.run_config_path, self.work / "features"
        specforge = shlex.join(self.train_argv())
        out = [self.draft_config_path, run_config, self.train_data_path]
        title = "SpecForge inputs: draft config, run config, training data (regen -> conversations)"
        inputs = Step(title, [self.drafter_config_path_text(), self.regen_dir], out, action=self.write_specforge_inputs)
        if self.profile == "production":
            check = f"check {a.gpus} GPUs, disk for checkpoints, SpecForge's schema and its own validation"
            train = f"train {a.epochs} epochs (lr {a.learning_rate}, max length {a.max_length}); resumes from its last"
            out = [self.specforge_output]
            return [
                inputs,
                Step(check, [run_config], command=f"{specforge} --plan", action=self.check_train),
                Step(f"{train} checkpoint", [run_config], out, specforge, lambda: self.run(self.train_argv())),
            ]
        plan = "SpecForge validates the run config it would train with (when installed)"
        hidden = "target hidden states at target_layer_ids (transformers, float32), one file per reply"
        capture = "python -m kimi_dflash.drafter_training.features (in-process)"
        standin = f"stand-in trainer: DFlash objective, {a.epochs} epochs, lr {a.learning_rate} (SpecForge would run:"
        return [
            inputs,
            Step(plan, [run_config], command=f"{specforge} --plan", action=self.specforge_plan),
            Step(hidden, [self.regen_dir], [features / "*.ckpt"], capture, self.capture_features),
            Step(f"{standin} {specforge})", [features], [self.trained], action=self.train_standin),
        ]

    def export_steps(self) -> list[Step]:
        serve_env = self.export_dir.parent / "serve.env"
        inputs, serve = [self.base_serve_config(), self.export_dir], f"./serve.sh {serve_env} --wait"
        serving = Step("config serving it", inputs, [serve_env], serve, self.write_serve_configs)
        if self.profile == "production":
            title, export = "SpecForge checkpoint -> HF directory", shlex.join(self.export_argv())
            return [Step(title, [self.specforge_output], [self.export_dir], export, self.export_specforge), serving]
        title = "trained drafter -> vLLM DFlash layout; untrained one beside it"
        written = [self.export_dir, self.export_dir.parent / "random-drafter"]
        return [Step(title, [self.trained], written, action=self.export_standin), serving]

    def drafter_config_path_text(self) -> str:
        if self.args.drafter_config or self.profile == "production":
            return str(self.drafter_config_path())
        return "<cache>/demo/kimi/drafter/config.json"

    def require(self, problem: str | None) -> None:
        if problem:
            raise PipelineError(problem)

    def run(self, argv: list[str]) -> None:
        self.say("$ " + " ".join(argv))
        completed = subprocess.run(argv, check=False)
        if completed.returncode:
            raise PipelineError(f"{argv[0]} exited with {completed.returncode}")

    def check_venv_disk(self) -> None:
        self.require(checks.disk_problem(self.venv, 12 * GIB))

    def install_specforge(self) -> None:
        if self.specforge_bin().exists():
            self.say(f"setup: SpecForge already in {self.venv}")
            return
        self.run([self.args.specforge_python, "-m", "venv", str(self.venv)])
        self.run([str(self.venv / "bin" / "pip"), "install", f"specforge=={SPECFORGE_VERSION}"])

    def check_schema(self) -> None:
        """The generated keys against SpecForge's schema, from the installed package or else its (cached) wheel."""
        from kimi_dflash.core.wheels import download_wheel
        from kimi_dflash.drafter_training.specforge_schema import read_schema

        installed = sorted((self.venv / "lib").glob("python3*/site-packages/specforge"))
        source = installed[-1].parent if installed else download_wheel(SPECFORGE_VERSION, dist="specforge")
        schema = read_schema(source)
        problems = schema.problems(self.run_config(self.architecture()))
        if problems:
            refused = f"SpecForge {schema.version} does not accept the generated config: {'; '.join(problems)}"
            raise PipelineError(f"{refused}. This pipeline generates for SpecForge {SPECFORGE_VERSION}")
        self.say(f"check: SpecForge {schema.version} accepts every generated key")

    def check_train(self) -> None:
        self.require(checks.gpu_problem(self.args.gpus))
        # Two checkpoints kept (weights + fp32 Adam state, ~16 bytes per parameter) and the bfloat16 export.
        parameters = self.architecture().parameter_count()
        self.require(checks.disk_problem(self.specforge_dir, 2 * 16 * parameters + 2 * parameters))
        self.check_schema()
        self.specforge_plan()

    def specforge_plan(self) -> None:
        """SpecForge's own validation (cross-field rules included): `--plan` starts nothing and needs no GPU."""
        if not self.specforge_bin().exists():
            if self.profile == "production":
                raise PipelineError(f"SpecForge is not installed in {self.venv}: run the setup phase")
            self.say(f"train: SpecForge not installed in {self.venv}; its plan check is skipped on the demo")
            return
        completed = subprocess.run([*self.train_argv(), "--plan"], capture_output=True, text=True, check=False)
        if completed.returncode:
            why = (completed.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise PipelineError(f"SpecForge refuses the generated run config: {why}")
        self.say("train: SpecForge validated the run config and planned its processes (--plan)")

    def perfectblend_argv(self) -> list[str]:
        """In SpecForge's venv: reading parquet needs pyarrow."""
        limit = ["--limit", str(self.args.prompt_limit)] if self.args.prompt_limit else []
        script = [str(self.venv / "bin" / "python"), "-m", "kimi_dflash.drafter_training.prompts", "--source"]
        source = ["perfectblend", "--perfectblend-dir", str(self.args.perfectblend_dir)]
        return [*script, *source, "--output", str(self.prompts), *limit]

    def demo_prompts(self) -> None:
        from kimi_dflash.drafter_training.prompts import demo_prompts, write_prompt_file

        count = write_prompt_file(demo_prompts(), self.prompts, self.args.prompt_limit)
        self.say(f"setup: {count} demo prompts in {self.prompts}")

    def check_regen(self) -> None:
        from kimi_dflash.validate.client import api_key_from_env  # aiohttp: only when a server is asked

        self.require(checks.server_problem(self.args.base_url, self.args.served_model, api_key_from_env()))
        # A record keeps the text and the token ids of prompt and reply: ~12 bytes per token, replies at the cap.
        lines = self.prompts.read_text(encoding="utf-8").count("\n") if self.prompts.exists() else 0
        self.require(checks.disk_problem(self.regen_dir, lines * (self.args.max_tokens + 512) * 12))

    def regen(self) -> None:
        from kimi_dflash.drafter_training.prompts import read_prompt_file
        from kimi_dflash.drafter_training.regen import RegenSettings, regenerate
        from kimi_dflash.validate.client import api_key_from_env

        prompts = read_prompt_file(self.prompts)
        if self.args.prompt_limit:
            prompts = prompts[: self.args.prompt_limit]
        a, key = self.args, api_key_from_env()
        settings = RegenSettings(a.base_url, str(a.served_model), a.max_tokens, concurrency=a.concurrency, api_key=key)
        summary = asyncio.run(regenerate(prompts, self.regen_dir, settings, say=self.say))
        if summary.failed:
            failed = self.regen_dir / "failed.jsonl"
            self.say(f"regen: {summary.failed} prompt(s) failed after retries, listed in {failed}; rerun to retry them")

    def run_config(self, arch: DrafterArchitecture) -> dict:
        from kimi_dflash.drafter_training.specforge_config import RunSettings, run_config

        a = self.args
        paths = (str(self.target_dir()), self.draft_config_path, self.train_data_path, self.specforge_output)
        return run_config(arch, RunSettings(*paths, a.gpus, a.epochs, a.learning_rate, a.max_length))

    def write_specforge_inputs(self) -> None:
        from kimi_dflash.drafter_training.regen import read_records
        from kimi_dflash.drafter_training.specforge_config import training_record

        arch = self.architecture()
        write_json_atomic(self.draft_config_path, specforge_draft_config(arch))
        write_json_atomic(self.run_config_path, self.run_config(arch))
        records = [training_record(record) for record in read_records(self.regen_dir)]
        lines = [json.dumps(record, ensure_ascii=False) + "\n" for record in records if record is not None]
        if not lines:
            raise PipelineError(f"{self.regen_dir}: no regenerated replies; run the regen phase first")
        write_text_atomic(self.train_data_path, "".join(lines))
        self.say(f"train: SpecForge inputs in {self.specforge_dir} ({len(lines)} conversations)")

    def capture_features(self) -> None:
        from kimi_dflash.drafter_training.features import capture_features
        from kimi_dflash.drafter_training.regen import read_records

        arch = self.architecture()
        target = self.target_dir()
        check_against_target(arch, read_config(target, "target"), self.args.max_length)
        records, features, limit = list(read_records(self.regen_dir)), self.work / "features", self.args.max_length
        counts = capture_features(records, target, arch.target_layer_ids, features, limit, say=self.say)
        self.say(f"train: features {counts}")

    def new_model(self, arch: DrafterArchitecture):  # type: ignore[no-untyped-def]
        from kimi_dflash.drafter_training.export import target_embeddings
        from kimi_dflash.drafter_training.model import DFlashDrafter

        embed, head = target_embeddings(self.target_dir())
        model = DFlashDrafter(arch.config, embed, head)
        model.init_weights(seed=0)
        return model

    def train_standin(self) -> None:
        import torch

        from kimi_dflash.drafter_training.features import feature_files
        from kimi_dflash.drafter_training.standin import TrainSettings, train

        torch.manual_seed(0)
        files = feature_files(self.work / "features")
        if not files:
            raise PipelineError(f"{self.work / 'features'}: no features; run the train phase from its first step")
        a = self.args
        settings = TrainSettings(a.epochs, a.learning_rate, stop_after_steps=a.stop_after_steps)
        train(self.new_model(self.architecture()), files, self.work / "train", settings, say=self.say)

    def export_standin(self) -> None:
        import torch

        from kimi_dflash.drafter_training.export import export_drafter

        arch = self.architecture()
        if not self.trained.exists():
            raise PipelineError(f"{self.trained}: no trained drafter; run the train phase first")
        state = torch.load(self.trained, map_location="cpu", weights_only=False)
        if state["step"] < state["total_steps"]:
            self.say(f"export: warning: training stopped at step {state['step']}/{state['total_steps']}")
        export_drafter(state["model"], arch, self.export_dir)
        export_drafter(self.new_model(arch).state_dict(), arch, self.export_dir.parent / "random-drafter")
        self.say(f"export: {self.export_dir} (trained), {self.export_dir.parent / 'random-drafter'} (untrained)")

    def export_argv(self) -> list[str]:
        specforge = [str(self.specforge_bin()), "export", "--to", "hf", "--checkpoint", str(self.specforge_output)]
        return [*specforge, "--draft-config", str(self.draft_config_path), "--output-dir", str(self.export_dir)]

    def export_specforge(self) -> None:
        from kimi_dflash.drafter_training.export import finalize_specforge_export

        self.run(self.export_argv())
        finalize_specforge_export(self.export_dir, self.architecture())

    def write_serve_configs(self) -> None:
        from kimi_dflash.drafter_training.export import write_serve_config

        target = self.target_dir() if self.profile == "demo" else None
        base = self.base_serve_config()
        out = self.export_dir.parent
        write_serve_config(out / "serve.env", base, target, self.export_dir)
        if self.profile == "demo":
            write_serve_config(out / "random.env", base, target, out / "random-drafter")
        self.say(f"export: serve it with kimi-dflash serve {out / 'serve.env'} --wait")
