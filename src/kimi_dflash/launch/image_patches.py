"""Image build step: as root, write the file patches the installed vLLM needs for the shipped configs (the decision
serve.sh makes at start, launch/prepare.py), so the runtime user never writes site-packages. Exit 0 when every
needed patch is applied, 1 when one did not apply or the vLLM tree is unrecognised."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.config.validate import ConfigError, load_config
from kimi_dflash.core.options import declare, option, run
from kimi_dflash.launch.prepare import prepare


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(kw_only=True)
class ImagePatchesOptions:
    configs: list[Path] = option("the configs the image serves", positional=True, required=True, metavar="CONFIG")


add_cli_args = declare(ImagePatchesOptions, __doc__)


def main(args: ImagePatchesOptions) -> int:
    for path in args.configs:
        try:
            config = load_config(path)
        except ConfigError as error:
            say(f"image patches: {path}: " + "; ".join(p.message for p in error.problems))
            return 1
        prepared = prepare(config, os.environ, say=say)
        say(f"image patches: {path.name}")
        # Twice: the first writes what is needed, the second proves nothing needed is still pending.
        second: list[str] = []
        applied = prepared.patch(say=say) and prepared.patch(say=second.append)
        if not applied or any(line.startswith("patches: writing") for line in second):
            say(f"image patches: a patch {path.name} needs could not be applied; failing the build")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash.launch.image_patches"))
