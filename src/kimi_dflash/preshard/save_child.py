"""Child process of the pre-sharder (`python -m kimi_dflash.preshard.save_child JSON`): load the checkpoint in vLLM and
save each worker's state (sharded_state). A child because the server's environment (LD_PRELOAD, ...) is set before
the process starts.
"""

from __future__ import annotations

import json
import os
import sys

import kimi_dflash.vllm_entry  # noqa: F401 - the CPU build's version lookup (see vllm_entry); harmless elsewhere
from kimi_dflash.preshard.worker import MAX_SIZE_ENV, OUTPUT_ENV


def main(argv: list[str]) -> int:
    request = json.loads(argv[0])
    # Read by kimi_dflash.preshard.worker in every worker process (they inherit this environment).
    os.environ[OUTPUT_ENV] = request["output"]
    os.environ[MAX_SIZE_ENV] = str(request["max_size"])
    from vllm import LLM

    llm = LLM(
        model=request["model"],
        worker_extension_cls="kimi_dflash.preshard.worker.PreshardWorkerExtension",
        **request["engine_args"],
    )
    written = llm.collective_rpc("kimi_dflash_preshard_files")
    if not all(written):
        print(
            "preshard: a worker saved nothing: this vLLM's model loader has no process_weights_after_loading "
            "step to hook (see kimi_dflash/preshard/worker.py)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
