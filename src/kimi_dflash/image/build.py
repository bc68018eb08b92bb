"""build-kimi26-dflash.sh: build Dockerfile.kimi26-dflash, pinned to a base-image digest, tagged with versions."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash import __version__
from kimi_dflash.core.options import declare, option, run

DOCKERFILE = "Dockerfile.kimi26-dflash"
DEFAULT_IMAGE = "vllm/vllm-openai-rocm"
DEFAULT_TAG = "v0.32.0"
TARGETS = ("rocm", "cpu-demo")
ENGINES = ("docker", "podman", "buildah")

DESCRIPTION = f"""\
Build the kimi-k26-dflash image from {DOCKERFILE}: vLLM's ROCm image ({DEFAULT_IMAGE}:{DEFAULT_TAG} by default)
plus this project, installed without touching the image's vLLM or torch, with the file patches the shipped configs
need written at build time (the build fails if one does not apply). Runs as a non-root user; HEALTHCHECK on /health.

The base is pinned by digest: unless --vllm-digest is given, it is resolved from the registry (skopeo, else a pull)
and printed, so the build can be repeated byte for byte. The tag is
kimi26-dflash:<project version>-vllm<vLLM version>[-cpu-demo], and both versions are labels.
"""

EPILOG = f"""\
examples:
  ./build-kimi26-dflash.sh                                  # 8x MI300X image from {DEFAULT_IMAGE}:{DEFAULT_TAG}
  ./build-kimi26-dflash.sh --vllm-tag v0.33.0 --vllm-digest sha256:...
  ./build-kimi26-dflash.sh --dry-run                        # print the build command only
  ./build-kimi26-dflash.sh --target cpu-demo --vllm-image localhost/kimi-dflash-cpu-base --vllm-tag 0.32.0 \\
      --allow-unpinned                                      # the CPU demo on a locally made base (no digest)
then run it as docs/deployment.md shows ("Container").
"""


def version_from_tag(tag: str) -> str | None:
    """vLLM's release tags are vX.Y.Z (optionally with a suffix after a dash)."""
    match = re.fullmatch(r"v?(\d+\.\d+\.\d+(?:\.post\d+)?)(?:[-_].*)?", tag)
    return match.group(1) if match else None


def resolve_digest(engine: str, reference: str) -> str:
    """The registry digest of `reference` (sha256:...), or a RuntimeError saying how to pass it by hand."""

    def output(*argv: str) -> str | None:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.stdout if done.returncode == 0 else None

    if shutil.which("skopeo") and (inspected := output("skopeo", "inspect", f"docker://{reference}")):
        return str(json.loads(inspected)["Digest"])
    if engine in ("docker", "podman") and subprocess.run([engine, "pull", reference], check=False).returncode == 0:
        found = output(engine, "image", "inspect", "--format", "{{index .RepoDigests 0}}", reference) or ""
        if "@" in found:
            return found.strip().split("@", 1)[1]
    raise RuntimeError(
        f"could not resolve the digest of {reference} (registry unreachable?); pass "
        "--vllm-digest sha256:... (from `docker buildx imagetools inspect` on a machine that can "
        "reach it), or --allow-unpinned for a local base image"
    )


@dataclass(kw_only=True)
class BuildOptions:
    target: str = option("rocm (default: 8x MI300X) or cpu-demo", choices=TARGETS, default="rocm")
    vllm_image: str = option(f"base image repository ({DEFAULT_IMAGE})", default=DEFAULT_IMAGE)
    vllm_tag: str = option(f"base image tag ({DEFAULT_TAG})", default=DEFAULT_TAG)
    vllm_digest: str | None = option("base image digest sha256:... (default: resolved from the registry)")
    vllm_version: str | None = option("vLLM version for the tag (default: from --vllm-tag, vX.Y.Z)")
    allow_unpinned: bool = option("build without a digest (a local base image has none)")
    engine: str | None = option("container tool (default: the first of them on PATH)", choices=ENGINES)
    context: Path = option("the checkout to build from (default: the current directory)", default=Path("."))
    engine_arg: list[str] = option(
        "extra argument for the container tool, e.g. --engine-arg=--isolation=chroot for podman/buildah where no OCI "
        "runtime can start",
        repeatable=True,
        metavar="ARG",
    )
    dry_run: bool = option("print the build command and exit")

    # Once main has resolved the engine, the version, the digest and the context: the build it runs.
    @property
    def tag(self) -> str:
        suffix = "-cpu-demo" if self.target == "cpu-demo" else ""
        return f"kimi26-dflash:{__version__}-vllm{self.vllm_version}{suffix}"

    def argv(self) -> list[str]:
        build = [self.engine, "build"] if self.engine != "buildah" else ["buildah", "bud"]
        flags = [
            ("--file", str(self.context / DOCKERFILE)),
            ("--target", self.target),
            ("--tag", self.tag),
            ("--build-arg", f"VLLM_IMAGE={self.vllm_image}"),
            ("--build-arg", f"VLLM_TAG={self.vllm_tag}"),
            ("--label", f"org.opencontainers.image.version={__version__}"),
            ("--label", f"ai.kimi-dflash.vllm-version={self.vllm_version}"),
            ("--label", f"ai.kimi-dflash.base={self.base_reference}"),
        ]
        if self.vllm_digest:
            flags.append(("--build-arg", f"VLLM_DIGEST={self.vllm_digest}"))
        return [*build, *(part for flag in flags for part in flag), *self.engine_arg, str(self.context)]

    @property
    def base_reference(self) -> str:
        digest = f"@{self.vllm_digest}" if self.vllm_digest else ""
        return f"{self.vllm_image}:{self.vllm_tag}{digest}"


add_cli_args = declare(BuildOptions, DESCRIPTION, EPILOG)


def say(message: str) -> None:
    print(f"build: {message}", file=sys.stderr)


def main(args: BuildOptions) -> int:
    engine = args.engine or next((name for name in ENGINES if shutil.which(name)), None)
    if engine is None:
        say("none of docker, podman, buildah is installed")
        return 1
    version = args.vllm_version or version_from_tag(args.vllm_tag)
    if version is None:
        say(f"cannot read a vLLM version from tag {args.vllm_tag!r}; pass --vllm-version X.Y.Z")
        return 2
    digest = args.vllm_digest
    if digest is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        say(f"--vllm-digest {digest!r} is not sha256:<64 hex digits>")
        return 2
    context = args.context.resolve()
    if not (context / DOCKERFILE).is_file():
        say(f"no {DOCKERFILE} in {context}: pass --context CHECKOUT (build-kimi26-dflash.sh does)")
        return 2
    if digest is None and not args.allow_unpinned and not args.dry_run:
        try:
            digest = resolve_digest(engine, f"{args.vllm_image}:{args.vllm_tag}")
        except RuntimeError as error:
            say(str(error))
            return 1
        say(f"base {args.vllm_image}:{args.vllm_tag} is {digest}")
    plan = dataclasses.replace(args, engine=engine, vllm_version=version, vllm_digest=digest, context=context)
    print(shlex.join(plan.argv()), file=sys.stderr if not args.dry_run else sys.stdout)
    if args.dry_run:
        return 0
    result = subprocess.run(plan.argv(), check=False)
    if result.returncode == 0:
        say(f"tagged {plan.tag} (base {plan.base_reference})")
    return result.returncode


if __name__ == "__main__":
    sys.exit(run(__name__, prog="build-kimi26-dflash.sh"))
