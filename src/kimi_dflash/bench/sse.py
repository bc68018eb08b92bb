"""Incremental Server-Sent Events decoder: a read may end mid-event (even between CR and LF), so the tail is kept.
Payloads stay bytes: ``json.loads`` takes bytes, which saves a decode per event."""

from __future__ import annotations


class SSEDecoder:
    """Feed raw body bytes; get back the ``data`` payloads of every event completed so far."""

    __slots__ = ("_crlf_seen", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._crlf_seen = False

    @property
    def idle(self) -> bool:
        """No unfinished event held back and no CR line endings seen: a read may bypass the decoder."""
        return not self._tail and not self._crlf_seen

    @property
    def pending(self) -> bytes:
        """Bytes of an event that has started but not finished (a truncated stream leaves these)."""
        return self._tail

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._tail + data if self._tail else data
        if b"\r" in buf or self._crlf_seen:
            self._crlf_seen = True
            # A CR at the very end may be the first half of a CRLF that the next read completes.
            keep_cr = buf.endswith(b"\r")
            if keep_cr:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                buf += b"\r"
        blocks = buf.split(b"\n\n")
        self._tail = blocks.pop()
        events: list[bytes] = []
        for block in blocks:
            # Fast path: the common single-line "data: {...}" event.
            if block[:6] == b"data: " and b"\n" not in block:
                events.append(block[6:])
            elif block:
                payload = _parse_block(block)
                if payload is not None:
                    events.append(payload)
        return events


def _parse_block(block: bytes) -> bytes | None:
    data_lines: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line[:1] == b":":
            continue  # blank or comment
        name, colon, value = line.partition(b":")
        if not colon:
            value = b""
        elif value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data_lines.append(value)
    if not data_lines:
        return None
    return b"\n".join(data_lines)
