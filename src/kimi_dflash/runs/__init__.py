"""Resumable runs, one mechanism for the sweep's points and qualify's steps: the state file (state) and the loop
that runs the units (orchestrator)."""
