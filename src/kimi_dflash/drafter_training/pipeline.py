"""train-drafter.sh: train a DFlash drafter matched to its target, in four phases.

  setup   SpecForge's own virtual environment (pinned), checked to speak the config keys generated; the prompts
  regen   the target writes every training reply itself, through this project's OpenAI server
  train   SpecForge (production) or the demo's stand-in trainer, resumable
  export  the drafter in vLLM's DFlash layout, and a config that serves it

Each phase is a list of steps (checks first); `--dry-run` prints them with their inputs, outputs and commands.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kimi_dflash.config.shipped import shipped_configs_dir
from kimi_dflash.core.atomic_write import write_json_atomic, write_text_atomic
from kimi_dflash.core.paths import cache_root
from kimi_dflash.drafter_training import checks
from kimi_dflash.drafter_training.architecture import (
    ArchitectureError,
    DrafterArchitecture,
    check_against_target,
    load_architecture,
    specforge_draft_config,
)

PHASES = ("setup", "regen", "train", "export")
SPECFORGE_VERSION = "0.2.0"
GIB = 1024**3

EPILOG = textwrap.dedent(f"""\
    phases (all four run in order unless skipped or picked with --phase):
      setup   production: SpecForge {SPECFORGE_VERSION} in its own venv (<cache>/specforge/venv; it pins torch,
              transformers and sglang, so never the serving venv), its config schema checked against the keys this
              pipeline generates, PerfectBlend's first user turns written to <work>/prompts.jsonl.
              demo: the shipped prompt set (200 prompts) to <work>/prompts.jsonl.
      regen   the target, served by serve.sh, writes every reply (/v1/chat/completions, temperature 0, token ids
              kept): concurrent, resumable by prompt id, failed prompts retried then counted, progress with ETA,
              output in atomically written chunks <work>/regen/part-*.jsonl. Checks /v1/models first.
      train   production: <work>/specforge/run-config.json + draft-config.json, then `specforge train --config`
              (6 epochs, lr 6e-4, max length 3072; resumes from its newest checkpoint). Checks GPU count and the
              SpecForge schema first. demo: the target's hidden states (transformers) and the stand-in trainer
              (the DFlash objective in plain torch, CPU), checkpointed every 50 steps, resumable.
      export  the drafter in vLLM's DFlash layout (config.json + model.safetensors), and an env config that
              serves it: ./serve.sh <work>/export/serve.env --wait. The demo also exports the untrained
              (random-init) drafter next to it for the acceptance comparison.

    examples:
      ./train-drafter.sh --dry-run                              # production plan, every step and command
      ./serve.sh configs/demo-cpu.env --wait && ./train-drafter.sh --demo
      ./train-drafter.sh --demo --phase train                   # one phase (repeat --phase for several)
      ./train-drafter.sh --skip-setup --skip-regen              # train + export on the GPU machine
    Picking the number of speculative tokens afterwards: launchers/kimi26-vllm-dflash-sweep.sh and
    payload/advise_spec_tokens.py (docs/drafter-training.md).
    """)


class PipelineError(Exception):
    """A check failed or an input is missing; the message names it and the fix."""


@dataclass
class Step:
    phase: str
    title: str
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    command: str | None = None  # the shell command it runs (or the equivalent), for --dry-run
    action: Callable[[], None] | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    base_url: str
    served_model: str | None
    max_tokens: int
    concurrency: int
    prompt_limit: int | None
    max_length: int
    epochs: int
    learning_rate: float
    gpus: int


PROFILES = {
    "production": Profile(
        "production",
        "http://127.0.0.1:8262",
        "kimi-k2.6-amd-dflash",
        max_tokens=2048,
        concurrency=64,
        prompt_limit=None,
        max_length=3072,
        epochs=6,
        learning_rate=6e-4,
        gpus=8,
    ),
    # Demo replies stay short: the CPU server writes ~200-500 tokens/s.
    "demo": Profile(
        "demo",
        "http://127.0.0.1:8262",
        "kimi-k26-dflash-demo",
        max_tokens=128,
        concurrency=8,
        prompt_limit=None,
        max_length=512,
        epochs=6,
        learning_rate=3e-3,
        gpus=2,
    ),
}


def parse_args(argv: list[str] | None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog or "train-drafter.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    parser.add_argument("--demo", action="store_true", help="the CPU demo: miniature Kimi target, stand-in trainer")
    parser.add_argument("--dry-run", action="store_true", help="print every step (inputs, outputs, command); run none")
    parser.add_argument("--phase", action="append", choices=PHASES, help="run only this phase (repeatable)")
    parser.add_argument("--skip-setup", action="store_true", help="skip the setup phase")
    parser.add_argument("--skip-regen", action="store_true", help="skip the regen phase (use <work>/regen as is)")
    parser.add_argument(
        "--work-dir", type=Path, help="where every phase writes (default <cache>/drafter-training/<production|demo>)"
    )
    parser.add_argument(
        "--configs-dir",
        type=Path,
        help="where the drafter config and the base serve configs are "
        "(default: the configs shipped with the package, i.e. the repository's configs/)",
    )
    parser.add_argument(
        "--drafter-config",
        type=Path,
        help="architecture to train (default: configs/kimi-k2.6-"
        "dflash-draft.json; demo: the fabricated demo drafter's config.json)",
    )
    parser.add_argument(
        "--target-dir",
        type=Path,
        default=Path("/models/Kimi-K2.6"),
        help="the target checkpoint (production; the demo fabricates its own)",
    )
    parser.add_argument(
        "--perfectblend-dir",
        type=Path,
        default=Path("/data/open-perfectblend"),
        help="PerfectBlend as downloaded (hf download mlabonne/open-perfectblend --repo-type dataset --local-dir DIR)",
    )
    parser.add_argument("--prompt-limit", type=int, help="use at most this many prompts")
    parser.add_argument("--base-url", help="the target's OpenAI server (default http://127.0.0.1:8262)")
    parser.add_argument("--served-model", help="model name the server must serve")
    parser.add_argument("--max-tokens", type=int, help="reply length cap for regen")
    parser.add_argument("--concurrency", type=int, help="regen requests in flight")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--max-length", type=int, help="training sequence length (production 3072)")
    parser.add_argument("--gpus", type=int, help="GPUs SpecForge trains on (production 8)")
    parser.add_argument("--stop-after-steps", type=int, help="demo trainer: stop (checkpointed) after N steps")
    parser.add_argument(
        "--export-dir",
        type=Path,
        help="where the drafter is written (default <work>/export/"
        "drafter; production-fp8kv-matched.env serves /models/Kimi-K2.6-DFlash)",
    )
    parser.add_argument(
        "--specforge-python", default="python3.11", help="interpreter SpecForge's venv is made from (python3.11)"
    )
    args = parser.parse_args(argv)
    if args.phase and (args.skip_setup or args.skip_regen):
        parser.error("--phase picks phases; do not combine it with --skip-*")
    return args


class Pipeline:
    def __init__(self, args: argparse.Namespace, say: Callable[[str], None] = print) -> None:
        self.args, self.say = args, say
        self.profile = PROFILES["demo" if args.demo else "production"]
        p = self.profile
        self.work = Path(args.work_dir or cache_root() / "drafter-training" / p.name).resolve()
        self.base_url = args.base_url or p.base_url
        self.served_model = args.served_model or p.served_model
        self.max_tokens = args.max_tokens or p.max_tokens
        self.concurrency = args.concurrency or p.concurrency
        self.prompt_limit = args.prompt_limit or p.prompt_limit
        self.epochs = args.epochs or p.epochs
        self.learning_rate = args.learning_rate or p.learning_rate
        self.max_length = args.max_length or p.max_length
        self.gpus = args.gpus if args.gpus is not None else p.gpus
        self.venv = cache_root() / "specforge" / "venv"
        self.prompts = self.work / "prompts.jsonl"
        self.regen_dir = self.work / "regen"
        self.specforge_dir = self.work / "specforge"
        self.export_dir = Path(args.export_dir or self.work / "export" / "drafter").resolve()
        self.configs = Path(args.configs_dir or shipped_configs_dir()).resolve()

    # -- inputs ---------------------------------------------------------------------------------------------
    def demo_models(self):  # type: ignore[no-untyped-def]
        from kimi_dflash.demo import ensure_demo_models

        return ensure_demo_models(choice="kimi", progress=self.say)

    def drafter_config_path(self) -> Path:
        if self.args.drafter_config:
            return Path(self.args.drafter_config)
        if self.profile.name == "demo":
            return self.demo_models().drafter_dir / "config.json"
        return self.configs / "kimi-k2.6-dflash-draft.json"

    def target_dir(self) -> Path:
        return self.demo_models().target_dir if self.profile.name == "demo" else Path(self.args.target_dir)

    def architecture(self) -> DrafterArchitecture:
        return load_architecture(self.drafter_config_path())

    def base_serve_config(self) -> Path:
        name = "demo-cpu.env" if self.profile.name == "demo" else "production-fp8kv-matched.env"
        return self.configs / name

    # -- phases ---------------------------------------------------------------------------------------------
    def steps(self) -> list[Step]:
        wanted = self.phases()
        builders = {
            "setup": self.setup_steps,
            "regen": self.regen_steps,
            "train": self.train_steps,
            "export": self.export_steps,
        }
        return [step for phase in PHASES if phase in wanted for step in builders[phase]()]

    def phases(self) -> list[str]:
        if self.args.phase:
            return list(self.args.phase)
        skipped = {"setup"} if self.args.skip_setup else set()
        skipped |= {"regen"} if self.args.skip_regen else set()
        return [phase for phase in PHASES if phase not in skipped]

    def specforge_bin(self) -> Path:
        return self.venv / "bin" / "specforge"

    def setup_steps(self) -> list[Step]:
        steps: list[Step] = []
        if self.profile.name == "production":
            steps.append(
                Step(
                    "setup",
                    "check disk space (SpecForge venv: 11 GiB measured)",
                    [str(self.venv)],
                    [],
                    None,
                    lambda: self.require(checks.disk_problem(self.venv, 12 * GIB)),
                )
            )
            steps.append(
                Step(
                    "setup",
                    f"SpecForge {SPECFORGE_VERSION} in its own venv (skipped when installed)",
                    [],
                    [str(self.venv)],
                    f"{self.args.specforge_python} -m venv {self.venv} && {self.venv}/bin/pip install "
                    f"specforge=={SPECFORGE_VERSION}",
                    self.install_specforge,
                )
            )
            steps.append(
                Step(
                    "setup",
                    "check SpecForge's config schema knows every key generated",
                    [str(self.venv)],
                    [],
                    None,
                    self.check_schema,
                )
            )
            steps.append(
                Step(
                    "setup",
                    "prompts: first user turn of every PerfectBlend conversation",
                    [str(self.args.perfectblend_dir)],
                    [str(self.prompts)],
                    f"{self.venv}/bin/python -m kimi_dflash.drafter_training.prompts --source perfectblend "
                    f"--perfectblend-dir {self.args.perfectblend_dir} --output {self.prompts}"
                    + (f" --limit {self.prompt_limit}" if self.prompt_limit else ""),
                    self.perfectblend_prompts,
                )
            )
        else:
            steps.append(
                Step(
                    "setup",
                    "prompts: the shipped demo prompt set",
                    ["kimi_dflash/data/kv_calibration_prompts.jsonl"],
                    [str(self.prompts)],
                    f"python -m kimi_dflash.drafter_training.prompts --source demo --output {self.prompts}",
                    self.demo_prompts,
                )
            )
        return steps

    def regen_steps(self) -> list[Step]:
        return [
            Step(
                "regen",
                f"check the server answers /v1/models with {self.served_model}, and disk space",
                [self.base_url],
                [],
                f"curl {self.base_url}/v1/models",
                self.check_regen,
            ),
            Step(
                "regen",
                f"regenerate every reply (max_tokens {self.max_tokens}, concurrency {self.concurrency}, temperature 0)",
                [str(self.prompts), self.base_url],
                [str(self.regen_dir / "part-*.jsonl"), str(self.regen_dir / "failed.jsonl")],
                f"POST {self.base_url}/v1/chat/completions per prompt (return_token_ids)",
                self.regen,
            ),
        ]

    def train_steps(self) -> list[Step]:
        sf = self.specforge_dir
        run_config, draft_config, data = sf / "run-config.json", sf / "draft-config.json", sf / "train.jsonl"
        specforge_command = f"{self.specforge_bin()} train --config {run_config}"
        steps = [
            Step(
                "train",
                "SpecForge inputs: draft config, run config, training data (regen -> conversations)",
                [str(self.drafter_config_path_text()), str(self.regen_dir)],
                [str(draft_config), str(run_config), str(data)],
                None,
                self.write_specforge_inputs,
            )
        ]
        if self.profile.name == "production":
            steps += [
                Step(
                    "train",
                    f"check {self.gpus} GPUs, disk for checkpoints, SpecForge's schema and its own validation",
                    [str(run_config)],
                    [],
                    f"{specforge_command} --plan",
                    self.check_train,
                ),
                Step(
                    "train",
                    f"train {self.epochs} epochs (lr {self.learning_rate}, max length {self.max_length}); "
                    "resumes from the newest checkpoint",
                    [str(run_config)],
                    [str(sf / "output")],
                    specforge_command,
                    lambda: self.run([str(self.specforge_bin()), "train", "--config", str(run_config)]),
                ),
            ]
        else:
            steps += [
                Step(
                    "train",
                    "SpecForge validates the run config it would train with (when installed)",
                    [str(run_config)],
                    [],
                    f"{specforge_command} --plan",
                    self.specforge_plan,
                ),
                Step(
                    "train",
                    "target hidden states at target_layer_ids (transformers, float32), one file per reply",
                    [str(self.regen_dir)],
                    [str(self.work / "features" / "*.ckpt")],
                    "python -m kimi_dflash.drafter_training.features (in-process)",
                    self.capture_features,
                ),
                Step(
                    "train",
                    f"stand-in trainer: DFlash objective, {self.epochs} epochs, lr {self.learning_rate} "
                    f"(SpecForge would run: {specforge_command})",
                    [str(self.work / "features")],
                    [str(self.work / "train" / "checkpoint.pt")],
                    None,
                    self.train_standin,
                ),
            ]
        return steps

    def export_steps(self) -> list[Step]:
        serve_env = self.export_dir.parent / "serve.env"
        steps = []
        if self.profile.name == "production":
            steps.append(
                Step(
                    "export",
                    "SpecForge checkpoint -> HF directory",
                    [str(self.specforge_dir / "output")],
                    [str(self.export_dir)],
                    f"{self.specforge_bin()} export --to hf --checkpoint {self.specforge_dir}/output "
                    f"--draft-config {self.specforge_dir}/draft-config.json --output-dir {self.export_dir}",
                    self.export_specforge,
                )
            )
        else:
            steps.append(
                Step(
                    "export",
                    "trained drafter -> vLLM DFlash layout; untrained one beside it",
                    [str(self.work / "train" / "checkpoint.pt")],
                    [str(self.export_dir), str(self.export_dir.parent / "random-drafter")],
                    None,
                    self.export_standin,
                )
            )
        steps.append(
            Step(
                "export",
                "config serving it",
                [str(self.base_serve_config()), str(self.export_dir)],
                [str(serve_env)],
                f"./serve.sh {serve_env} --wait",
                self.write_serve_configs,
            )
        )
        return steps

    def drafter_config_path_text(self) -> str:
        if self.args.drafter_config or self.profile.name == "production":
            return str(self.drafter_config_path())
        return "<cache>/demo/kimi/drafter/config.json"

    # -- actions --------------------------------------------------------------------------------------------
    def require(self, problem: str | None) -> None:
        if problem:
            raise PipelineError(problem)

    def run(self, argv: list[str]) -> None:
        self.say("$ " + " ".join(argv))
        completed = subprocess.run(argv, check=False)
        if completed.returncode:
            raise PipelineError(f"{argv[0]} exited with {completed.returncode}")

    def install_specforge(self) -> None:
        if self.specforge_bin().exists():
            self.say(f"setup: SpecForge already in {self.venv}")
            return
        self.run([self.args.specforge_python, "-m", "venv", str(self.venv)])
        self.run([str(self.venv / "bin" / "pip"), "install", f"specforge=={SPECFORGE_VERSION}"])

    def check_schema(self) -> None:
        """Static check, before anything is installed: the generated keys against SpecForge's pydantic schema, read
        from the installed package or else from its wheel (downloaded once into the cache)."""
        from kimi_dflash.drafter_training.specforge_schema import read_schema
        from kimi_dflash.patcher.wheels import download_wheel

        installed = sorted((self.venv / "lib").glob("python3*/site-packages/specforge"))
        source = installed[-1].parent if installed else download_wheel(SPECFORGE_VERSION, dist="specforge")
        schema = read_schema(source)
        problems = schema.problems(self.run_config(self.architecture()))
        if problems:
            raise PipelineError(
                f"SpecForge {schema.version} does not accept the generated config: "
                + "; ".join(problems)
                + f". This pipeline generates for SpecForge {SPECFORGE_VERSION}"
            )
        self.say(f"check: SpecForge {schema.version} accepts every generated key")

    def check_train(self) -> None:
        self.require(checks.gpu_problem(self.gpus))
        # Two checkpoints kept (weights + fp32 Adam state, ~16 bytes per parameter) and the bfloat16 export.
        parameters = self.architecture().parameter_count()
        self.require(checks.disk_problem(self.specforge_dir, 2 * 16 * parameters + 2 * parameters))
        self.check_schema()
        self.specforge_plan()

    def specforge_plan(self) -> None:
        """SpecForge's own validation of the whole run config (cross-field rules included) and its process plan:
        `specforge train --plan` starts nothing and needs no GPU."""
        if not self.specforge_bin().exists():
            if self.profile.name == "production":
                raise PipelineError(f"SpecForge is not installed in {self.venv}: run the setup phase")
            self.say(f"train: SpecForge not installed in {self.venv}; its plan check is skipped on the demo")
            return
        completed = subprocess.run(
            [str(self.specforge_bin()), "train", "--config", str(self.specforge_dir / "run-config.json"), "--plan"],
            capture_output=True,
            text=True,
            check=False,
        )
        if completed.returncode:
            raise PipelineError(
                "SpecForge refuses the generated run config: "
                + (completed.stderr.strip().splitlines() or ["(no message)"])[-1]
            )
        self.say("train: SpecForge validated the run config and planned its processes (--plan)")

    def perfectblend_prompts(self) -> None:
        self.run(
            [
                str(self.venv / "bin" / "python"),
                "-m",
                "kimi_dflash.drafter_training.prompts",
                "--source",
                "perfectblend",
                "--perfectblend-dir",
                str(self.args.perfectblend_dir),
                "--output",
                str(self.prompts),
                *(["--limit", str(self.prompt_limit)] if self.prompt_limit else []),
            ]
        )

    def demo_prompts(self) -> None:
        from kimi_dflash.drafter_training.prompts import demo_prompts, write_prompt_file

        count = write_prompt_file(demo_prompts(), self.prompts, self.prompt_limit)
        self.say(f"setup: {count} demo prompts in {self.prompts}")

    def check_regen(self) -> None:
        self.require(checks.server_problem(self.base_url, self.served_model))
        # A record keeps the text and the token ids of prompt and reply: ~12 bytes per token, replies at the cap.
        lines = self.prompts.read_text(encoding="utf-8").count("\n") if self.prompts.exists() else 0
        self.require(checks.disk_problem(self.regen_dir, lines * (self.max_tokens + 512) * 12))

    def regen(self) -> None:
        from kimi_dflash.drafter_training.prompts import read_prompt_file
        from kimi_dflash.drafter_training.regen import RegenSettings, regenerate

        prompts = read_prompt_file(self.prompts)
        if self.prompt_limit:
            prompts = prompts[: self.prompt_limit]
        settings = RegenSettings(
            base_url=self.base_url,
            model=str(self.served_model),
            max_tokens=self.max_tokens,
            concurrency=self.concurrency,
        )
        summary = asyncio.run(regenerate(prompts, self.regen_dir, settings, say=self.say))
        if summary.failed:
            self.say(
                f"regen: {summary.failed} prompt(s) failed after retries, listed in "
                f"{self.regen_dir / 'failed.jsonl'}; rerun regen to retry them"
            )

    def run_config(self, arch: DrafterArchitecture) -> dict:
        from kimi_dflash.drafter_training.specforge_config import RunSettings, run_config

        sf = self.specforge_dir
        settings = RunSettings(
            target_model_path=str(self.target_dir()),
            draft_config_path=sf / "draft-config.json",
            train_data_path=sf / "train.jsonl",
            output_dir=sf / "output",
            gpus=self.gpus,
            epochs=self.epochs,
            learning_rate=self.learning_rate,
            max_length=self.max_length,
        )
        return run_config(arch, settings)

    def write_specforge_inputs(self) -> None:
        from kimi_dflash.drafter_training.regen import read_records
        from kimi_dflash.drafter_training.specforge_config import training_lines

        arch = self.architecture()
        sf = self.specforge_dir
        write_json_atomic(sf / "draft-config.json", specforge_draft_config(arch))
        write_json_atomic(sf / "run-config.json", self.run_config(arch))
        lines = list(training_lines(read_records(self.regen_dir)))
        if not lines:
            raise PipelineError(f"{self.regen_dir}: no regenerated replies; run the regen phase first")
        write_text_atomic(sf / "train.jsonl", "".join(lines))
        self.say(f"train: SpecForge inputs in {sf} ({len(lines)} conversations)")

    def capture_features(self) -> None:
        from kimi_dflash.drafter_training.features import capture_features
        from kimi_dflash.drafter_training.regen import read_records

        arch = self.architecture()
        target = self.target_dir()
        check_against_target(arch, json.loads((target / "config.json").read_text()), self.max_length)
        counts = capture_features(
            list(read_records(self.regen_dir)),
            target,
            arch.target_layer_ids,
            self.work / "features",
            self.max_length,
            say=self.say,
        )
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
        settings = TrainSettings(
            epochs=self.epochs, learning_rate=self.learning_rate, stop_after_steps=self.args.stop_after_steps
        )
        train(self.new_model(self.architecture()), files, self.work / "train", settings, say=self.say)

    def export_standin(self) -> None:
        import torch

        from kimi_dflash.drafter_training.export import export_drafter
        from kimi_dflash.drafter_training.standin import CHECKPOINT

        arch = self.architecture()
        checkpoint = self.work / "train" / CHECKPOINT
        if not checkpoint.exists():
            raise PipelineError(f"{checkpoint}: no trained drafter; run the train phase first")
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        if state["step"] < state["total_steps"]:
            self.say(f"export: warning: training stopped at step {state['step']}/{state['total_steps']}")
        export_drafter(state["model"], arch, self.export_dir)
        export_drafter(self.new_model(arch).state_dict(), arch, self.export_dir.parent / "random-drafter")
        self.say(f"export: {self.export_dir} (trained), {self.export_dir.parent / 'random-drafter'} (untrained)")

    def export_specforge(self) -> None:
        from kimi_dflash.drafter_training.export import finalize_specforge_export

        self.run(
            [
                str(self.specforge_bin()),
                "export",
                "--to",
                "hf",
                "--checkpoint",
                str(self.specforge_dir / "output"),
                "--draft-config",
                str(self.specforge_dir / "draft-config.json"),
                "--output-dir",
                str(self.export_dir),
            ]
        )
        finalize_specforge_export(self.export_dir, self.architecture())

    def write_serve_configs(self) -> None:
        from kimi_dflash.drafter_training.export import write_serve_config

        target = self.target_dir() if self.profile.name == "demo" else None
        base = self.base_serve_config()
        out = self.export_dir.parent
        write_serve_config(out / "serve.env", base, target, self.export_dir)
        if self.profile.name == "demo":
            write_serve_config(out / "random.env", base, target, out / "random-drafter")
        self.say(f"export: serve it with kimi-dflash serve {out / 'serve.env'} --wait")


def describe(steps: list[Step]) -> str:
    lines = []
    for number, step in enumerate(steps, 1):
        lines.append(f"[{number}] {step.phase}: {step.title}")
        if step.inputs:
            lines.append(f"      in:  {', '.join(step.inputs)}")
        if step.outputs:
            lines.append(f"      out: {', '.join(step.outputs)}")
        if step.command:
            lines.append(f"      run: {step.command}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = parse_args(argv, prog)
    pipeline = Pipeline(args)
    try:
        steps = pipeline.steps()
        if args.dry_run:
            print(f"train-drafter ({pipeline.profile.name}), work dir {pipeline.work}; nothing is run:")
            print(describe(steps))
            return 0
        for number, step in enumerate(steps, 1):
            print(f"== [{number}/{len(steps)}] {step.phase}: {step.title}", flush=True)
            if step.action is not None:
                step.action()
    except (PipelineError, ArchitectureError, ValueError) as error:
        print(f"train-drafter: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("train-drafter: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
