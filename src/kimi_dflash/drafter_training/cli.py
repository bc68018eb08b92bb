"""train-drafter.sh / `kimi-dflash train-drafter`: the command line; each option left out takes the profile's value."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from kimi_dflash.bench.settings import DEFAULT_BASE_URL
from kimi_dflash.core.options import MAX_TOKENS, declare, http_url, option, run
from kimi_dflash.drafter_training import pipeline
from kimi_dflash.drafter_training.architecture import ArchitectureError
from kimi_dflash.drafter_training.pipeline import SPECFORGE_VERSION, Pipeline, PipelineError, Step

EPILOG = textwrap.dedent(f"""\
    phases (all four in order unless skipped or picked with --phase; in detail: docs/drafter-training.md):
      setup   SpecForge {SPECFORGE_VERSION} in its own venv; the prompts (demo: the shipped 200) to <work>/prompts.jsonl
      regen   the target, behind serve.sh, writes every reply (T=0, token ids kept) to <work>/regen/, resumably
      train   production: `specforge train --config`; demo: the target's hidden states, the stand-in trainer (CPU)
      export  the drafter in vLLM's DFlash layout and an env config serving it (<work>/export/serve.env)

    examples:
      ./train-drafter.sh --dry-run                              # production plan, every step and command
      ./serve.sh configs/demo-cpu.env --wait && ./train-drafter.sh --demo
      ./train-drafter.sh --demo --phase train                   # one phase (repeat --phase for several)
      ./train-drafter.sh --skip-setup --skip-regen              # train + export on the GPU machine
    Then pick the number of speculative tokens: kimi-dflash sweep, kimi-dflash advise.
    """)


class Profile(NamedTuple):
    """What each option left out means. Demo replies stay short: the CPU server writes ~200-500 tokens/s."""

    served_model: str
    max_tokens: int
    concurrency: int
    max_length: int
    learning_rate: float
    gpus: int
    base_url: str = DEFAULT_BASE_URL
    epochs: int = 6


PROFILES = {
    "production": Profile("kimi-k2.6-amd-dflash", 2048, 64, 3072, 6e-4, 8),
    "demo": Profile("kimi-k26-dflash-demo", 128, 8, 512, 3e-3, 2),
}


@dataclass(kw_only=True)
class TrainDrafterOptions:
    demo: bool = option("the CPU demo: miniature Kimi target, stand-in trainer")
    dry_run: bool = option("print every step (inputs, outputs, command); run none")
    phase: list[Literal["setup", "regen", "train", "export"]] | None = option("run only this phase", repeatable=True)
    skip_setup: bool = option("skip the setup phase")
    skip_regen: bool = option("skip the regen phase (use <work>/regen as is)")
    work_dir: Path | None = option("where every phase writes (default <cache>/drafter-training/<production|demo>)")
    configs_dir: Path | None = option("the drafter config and the base serve configs (default: the shipped configs/)")
    drafter_config: Path | None = option("architecture to train (default: configs/kimi-k2.6-dflash-draft.json)")
    target_dir: Path = option("the target checkpoint (production)", default=Path("/models/Kimi-K2.6"))
    perfectblend_dir: Path = option("mlabonne/open-perfectblend, downloaded", default=Path("/data/open-perfectblend"))
    prompt_limit: int | None = option("use at most this many prompts", minimum=1)
    base_url: str | None = option(f"the target's OpenAI server (default {DEFAULT_BASE_URL})", parse=http_url)
    served_model: str | None = option("model name the server must serve")
    max_tokens: int | None = option("reply length cap for regen", minimum=1, maximum=MAX_TOKENS)
    concurrency: int | None = option("regen requests in flight (at most one per prompt)", minimum=1, maximum=4096)
    epochs: int | None = option(minimum=1)
    learning_rate: float | None = option(above=0)
    max_length: int | None = option("training sequence length (production 3072)", minimum=1)
    gpus: int | None = option("GPUs SpecForge trains on (production 8)", minimum=1)
    stop_after_steps: int | None = option("demo trainer: stop (checkpointed) after N steps", minimum=1)
    export_dir: Path | None = option("where the drafter is written (default <work>/export/drafter)")
    specforge_python: str = option("interpreter SpecForge's venv is made from", default="python3.11")

    @property
    def profile(self) -> str:
        return "demo" if self.demo else "production"

    def with_profile(self) -> TrainDrafterOptions:
        """These options with each one left out taken from the profile."""
        taken = {name: value for name, value in PROFILES[self.profile]._asdict().items() if getattr(self, name) is None}
        return dataclasses.replace(self, **taken)

    def check(self) -> None:
        if self.phase and (self.skip_setup or self.skip_regen):
            raise ValueError("--phase picks phases; do not combine it with --skip-*")


add_cli_args = declare(TrainDrafterOptions, str(pipeline.__doc__).split("\n\n")[0], EPILOG)


def describe(steps: list[Step]) -> str:
    lines = []
    for number, step in enumerate(steps, 1):
        lines.append(f"[{number}] {step.phase}: {step.title}")
        inputs, outputs = (", ".join(map(str, paths)) for paths in (step.inputs, step.outputs))
        shown = {"in: ": inputs, "out:": outputs, "run:": step.command}
        lines += [f"      {label} {text}" for label, text in shown.items() if text]
    return "\n".join(lines)


def main(args: TrainDrafterOptions) -> int:
    pipeline = Pipeline(args)
    try:
        steps = pipeline.steps()
        if args.dry_run:
            print(f"train-drafter ({pipeline.profile}), work dir {pipeline.work}; nothing is run:")
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
    sys.exit(run(__name__, prog="train-drafter.sh"))
