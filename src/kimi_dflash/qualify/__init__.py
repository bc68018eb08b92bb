"""qualify: one command that qualifies a box — is DFlash lossless and worth it here, and with which settings.

plan.py (steps, grid, estimates) -> state.py (state.json, resume) -> steps.py (one function per step:
preflight, servers, lossless, grid, acceptance, goodput) run by runner.py -> report.py +
figures.py (report.md, PNGs, verdicts, exit code) -> bundle.py (results/ and OUT.tar.gz). cli.py is the command
line.
"""
