"""The rules, one theme per module; each module declares `RULES: tuple[Rule, ...]` and the source facts its rules
read. The engine (rules/engine.py) finds every module here by itself, and the docs' rules and runtime-facts tables
(python -m kimi_dflash_lab matrix --write) are generated from the declarations.

Adding a rule is two files (docs/development.md, "A compatibility rule"): a module here holding the rule and the
facts it reads (a source fact returns its `SourceLine` via `source.line_of(...)` / `source.function(...)`; the
checkpoints' config.json is `deployment.target.config` / `deployment.drafter.config`), and its test under
tests/unit/rules/.
"""
