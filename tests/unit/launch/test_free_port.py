"""The port a server is given before it starts (qualify, sweep, the tests' servers): never one the kernel can hand
to another socket while the server is still importing vLLM."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kimi_dflash.launch import serve_sh
from kimi_dflash.launch.serve_sh import free_port


def test_the_port_is_below_the_kernels_ephemeral_range_and_free() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= port < low for port in ports) and len(ports) > 1  # drawn, not one fixed port
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # raises if it was not free


def test_a_taken_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken = held.getsockname()[1]
        spare = next(port for port in range(taken - 1, 1024, -1) if _bindable(port))
        monkeypatch.setattr(serve_sh.random, "sample", lambda population, k: [taken, spare])  # the draw hits it first
        assert serve_sh.free_port() == spare


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
