"""One JSON encoding for every file the demo writes: sorted keys and fixed indentation keep builds byte-identical."""

from __future__ import annotations

import json


def json_bytes(obj: object) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
