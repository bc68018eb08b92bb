"""The leaf every layer may use: standard library only (atomic files, the user-error type, paths, env names,
generated-doc sections, directory locks, the number formatter). Nothing here imports another kimi_dflash package."""
