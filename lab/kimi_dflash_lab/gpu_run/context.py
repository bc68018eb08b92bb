"""The run's context: where things are, the environment every command gets, and the few ways a step runs one
(each command line logged to RESULTS_DIR/logs/ with its output, and said on the terminal as it starts and ends)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kimi_dflash_lab import LAB_ROOT

CHECKOUT = LAB_ROOT.parent
KIT_MARKER = ".kimi-dflash-kit-installed"
DEADLINE_MARGIN_S = 20.0  # a step killed at the deadline still has to stop its servers and write its state
TERM_GRACE_S = 90.0
CHAT_PROMPT = "Tell me about the harbor."


@dataclass(frozen=True)
class Sizes:
    """Workload sizes of the client commands: real on a GPU, token-sized on the CPU rehearsal."""

    calibrate: tuple[str, ...]
    validate: tuple[str, ...]
    bench: tuple[str, ...]
    chat_tokens: int


GPU_SIZES = Sizes(
    calibrate=("--limit", "32", "--max-tokens", "64", "--concurrency", "16"),
    validate=("--prompts", "16", "--max-tokens", "64", "--concurrency", "8"),
    bench=("--max-tokens", "256", "--warmup", "2", "--repeats", "3"),
    chat_tokens=64,
)
CPU_SIZES = Sizes(
    calibrate=("--limit", "2", "--max-tokens", "8", "--concurrency", "2"),
    validate=("--prompts", "2", "--max-tokens", "8", "--concurrency", "2"),
    bench=("--max-tokens", "8", "--warmup", "1"),
    chat_tokens=16,
)


class StepFailed(Exception):
    """A command of a step failed; the message names it and its log."""


@dataclass
class Context:
    results: Path
    config: str  # as given (a path relative to the checkout, or absolute)
    fp8_config: str
    gpu: bool  # the config's DEVICE is not cpu
    python: str  # the interpreter that runs the project's commands and vLLM
    site: Path  # where the GPU kit installs vLLM 0.26.0 (persists between parts on a warm machine)
    bundle: Path  # the GPU kit bundle lab/gpu/prepare.sh built
    deadline: float  # time.monotonic() by which the part must be done
    checkout: Path = CHECKOUT
    state: dict = field(default_factory=dict)
    kept: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    part: int = 1
    counter: int = 0
    facts: dict = field(default_factory=dict)  # read once from the config

    @property
    def sizes(self) -> Sizes:
        return GPU_SIZES if self.gpu else CPU_SIZES

    @property
    def kimi_dflash(self) -> list[str]:
        return [self.python, "-m", "kimi_dflash.cli"]

    @property
    def lab(self) -> list[str]:
        return [self.python, "-m", "kimi_dflash_lab"]

    @property
    def logs(self) -> Path:
        return self.results / "logs"

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def environ(self, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
        """Every command's environment: the checkout's src/ and lab/ (and on a GPU the kit's SITE, its `vllm`
        command) first, offline hub, the interpreter serve.sh uses, then the step's config overrides."""
        env = dict(os.environ)
        paths = [str(self.checkout / "src"), str(self.checkout / "lab")]
        if self.gpu:
            paths.append(str(self.site))
            env["PATH"] = f"{self.site / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
        env["KIMI_PYTHON"] = self.python
        env.update(overrides or {})
        return env

    def _log_path(self, label: str) -> Path:
        self.counter += 1
        self.logs.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)
        return self.logs / f"p{self.part}-{self.counter:02d}-{safe}.log"

    def sh(
        self, label: str, argv: Sequence[str], *, check: bool = True, overrides: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run one command to the end (bounded by the part's deadline), its command line and output in a log."""
        log = self._log_path(label)
        say(
            f"    $ {' '.join(argv)}"
            + (f"   [{' '.join(f'{k}={v}' for k, v in overrides.items())}]" if overrides else "")
        )
        started = time.monotonic()
        try:
            done = subprocess.run(
                list(argv), cwd=self.checkout, env=self.environ(overrides), capture_output=True, text=True,
                timeout=max(self.remaining(), 1.0), check=False, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired as expired:
            log.write_text(_log_text(argv, overrides, expired.stdout, expired.stderr, "killed at the deadline"))
            raise StepFailed(f"{label}: still running at the part's deadline (log {log})") from None
        log.write_text(_log_text(argv, overrides, done.stdout, done.stderr, f"exit {done.returncode}"))
        say(f"      exit {done.returncode} in {time.monotonic() - started:.1f} s (log {log.relative_to(self.results)})")
        if check and done.returncode != 0:
            tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
            raise StepFailed(f"{label} exited {done.returncode}: {' | '.join(tail)} (log {log})")
        return done

    def sh_until_deadline(self, label: str, argv: Sequence[str]) -> int | None:
        """Run a resumable command until the part's deadline; then SIGTERM (it saves its state and stops its
        servers), SIGKILL after a grace period. Its exit code (143 when stopped at the deadline)."""
        log = self._log_path(label)
        say(f"    $ {' '.join(argv)}   (until the part's deadline, {self.remaining():.0f} s)")
        with log.open("w", encoding="utf-8") as handle:
            handle.write(f"$ {' '.join(argv)}\n")
            handle.flush()
            process = subprocess.Popen(
                list(argv), cwd=self.checkout, env=self.environ(), stdout=handle, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                code = process.wait(timeout=max(self.remaining() - DEADLINE_MARGIN_S, 1.0))
            except subprocess.TimeoutExpired:
                say("      the part's deadline: SIGTERM (the command keeps its state for the next part)")
                process.send_signal(signal.SIGTERM)
                try:
                    code = process.wait(timeout=TERM_GRACE_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    code = process.wait()
        say(f"      exit {code} (log {log.relative_to(self.results)})")
        return code

    # ---------------------------------------------------------------- servers

    def server_log(self, label: str) -> Path:
        return self.logs / f"vllm-{label}.log"

    def serve(
        self, config: str, label: str, overrides: Mapping[str, str] | None = None, skip_preflight: bool = False
    ) -> float:
        """`serve.sh CONFIG --wait` (preflight included unless told): the seconds until it answered."""
        argv = ["./serve.sh", config, "--wait", "--log", str(self.server_log(label))]
        started = time.monotonic()
        self.sh(f"serve {label}", [*argv, *(["--skip-preflight"] if skip_preflight else [])], overrides=overrides)
        return round(time.monotonic() - started, 1)

    def stop(self, config: str, label: str, overrides: Mapping[str, str] | None = None) -> None:
        self.sh(f"stop {label}", ["./serve.sh", config, "--stop"], overrides=overrides, check=False)
        self.kept = [(c, o) for c, o in self.kept if not (c == config and o == dict(overrides or {}))]

    def keep_running(self, config: str, overrides: Mapping[str, str] | None = None) -> None:
        """A server a later step uses; stop_kept() (or the end of the part) stops it."""
        self.kept.append((config, dict(overrides or {})))

    def stop_kept(self) -> None:
        for config, overrides in list(self.kept):
            self.stop(config, "kept", overrides)

    def preflight(self, config: str, label: str, overrides: Mapping[str, str]) -> dict:
        """`serve.sh CONFIG --preflight`: its exit and its FAIL lines (on the rehearsal: the dry run only)."""
        if not self.gpu:
            return {"skipped": "CPU rehearsal: a CUDA config's preflight needs the GPU (its dry run follows)"}
        done = self.sh(f"preflight {label}", ["./serve.sh", config, "--preflight"], overrides=overrides, check=False)
        fails = [line for line in (done.stdout + done.stderr).splitlines() if "[FAIL]" in line]
        return {"exit": done.returncode, "fail_lines": fails}

    def dry_run(self, config: str, label: str, overrides: Mapping[str, str]) -> None:
        self.sh(f"dry-run {label}", ["./serve.sh", config, "--dry-run"], overrides=overrides)

    @property
    def port(self) -> int:
        """The config's PORT (the BF16 server's; the FP8 one beside it gets PORT + 1)."""
        if "port" not in self.facts:
            [port] = self.config_values(self.config, "PORT")
            self.facts["port"] = int(port)
        return int(self.facts["port"])

    def url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"

    def chat(self, config: str, label: str) -> dict:
        """A chat completion with curl, as README shows it; the reply saved as chat-LABEL.json."""
        port, model = self.config_values(config, "PORT", "SERVED_MODEL_NAME")
        body = {"model": model, "messages": [{"role": "user", "content": CHAT_PROMPT}],
                "max_tokens": self.sizes.chat_tokens, "temperature": 0}  # fmt: skip
        out = self.results / f"chat-{label}.json"
        self.sh(f"curl {label}", ["curl", "-sS", "--fail", "--max-time", "120", "-o", str(out),
                                  f"{self.url(int(port))}/v1/chat/completions", "-H", "Content-Type: application/json",
                                  "-d", json.dumps(body)])  # fmt: skip
        reply = json.loads(out.read_text(encoding="utf-8"))
        return {"completion_tokens": reply["usage"]["completion_tokens"],
                "text": reply["choices"][0]["message"]["content"][:200]}  # fmt: skip

    # ---------------------------------------------------------------- facts

    def config_values(self, config: str, *keys: str) -> list[str]:
        """Values of a config's keys, read by the project's own loader in the serving Python."""
        script = (
            "import sys; from kimi_dflash.config.validate import load_config; "
            "values = load_config(sys.argv[1]).values; print('\\n'.join(str(values[k]) for k in sys.argv[2:]))"
        )
        done = self.sh("config", [self.python, "-c", script, config, *keys])
        return done.stdout.strip().splitlines()[-len(keys) :]

    def demo_choice(self, config: str) -> str:
        [choice] = self.config_values(config, "FABRICATE_DEMO_MODELS")
        return choice

    def has_module(self, name: str) -> bool:
        script = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({name!r}) else 1)"
        return self.sh(f"has {name}?", [self.python, "-c", script], check=False).returncode == 0

    def jit_cache_files(self) -> int:
        """Files in the driver's JIT cache the plan points CUDA_CACHE_PATH at (<project cache>/cuda-jit)."""
        done = self.sh("cache root", [self.python, "-m", "kimi_dflash.core.paths"])
        cache = Path(done.stdout.strip().splitlines()[-1]) / "cuda-jit"
        return sum(1 for p in cache.rglob("*") if p.is_file()) if cache.is_dir() else 0

    def record(self, file: str, key: str, value: dict) -> dict:
        """Merge `value` under `key` into RESULTS_DIR/FILE (JSON), and return it."""
        path = self.results / file
        document = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        document[key] = value
        path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        return value

    # ---------------------------------------------------------------- the GPU kit

    def kit_installed(self) -> bool:
        return (self.site / KIT_MARKER).is_file() and (self.site / "bin" / "vllm").is_file()

    def mark_kit_installed(self) -> None:
        (self.site / KIT_MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S") + "\n", encoding="utf-8")

    def write_vllm_command(self) -> None:
        """The kit is a tar install without console scripts; the plan runs `vllm serve` (preflight reads this
        script's shebang to find the serving Python)."""
        command = self.site / "bin" / "vllm"
        command.parent.mkdir(parents=True, exist_ok=True)
        command.write_text(
            f"#!{self.python}\nimport sys\nfrom vllm.entrypoints.cli.main import main\nsys.exit(main())\n",
            encoding="utf-8",
        )
        command.chmod(0o755)


def _log_text(argv: Sequence[str], overrides: Mapping[str, str] | None, out: object, err: object, end: str) -> str:
    def text(value: object) -> str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")  # type: ignore[return-value]

    env = "".join(f"{k}={v} " for k, v in (overrides or {}).items())
    return f"$ {env}{' '.join(argv)}\n--- stdout\n{text(out)}\n--- stderr\n{text(err)}\n--- {end}\n"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
