"""The rules, one theme per module, each declaring `RULES` and the source facts they read. The engine finds every module
here by itself; the docs' tables are generated from them. Adding one: docs/development.md, "A runtime rule"."""
