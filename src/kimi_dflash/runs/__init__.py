"""Resumable runs, one mechanism for the sweep's points and qualify's steps.

state         the run's state file: signature, each unit's record, invocations, the manifest of files written
orchestrator  run the units in order: finished ones kept, failures recorded, progress with ETA, SIGTERM
The servers a run starts go through launch.serve_sh; the directory's lock is core.dir_lock.
"""
