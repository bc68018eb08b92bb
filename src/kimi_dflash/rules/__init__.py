"""Will this vLLM run this plan? The compatibility rules, the vLLM source facts they read, and the engine that runs
each rule once over one planned deployment and one vLLM tree (read as source, never imported).

    from kimi_dflash.rules.deployment import Deployment
    from kimi_dflash.rules.engine import judge
    from kimi_dflash.rules.source import VllmSource
    verdict = judge(Deployment.for_plan(config, plan), VllmSource.open(vllm_dir))

Modules: source.py (the reader: one object per tree, each file parsed once), deployment.py + checkpoint.py (the plan
and its checkpoints as the rules see them), features.py (named feature probes), backends.py (attention-backend facts
several rules share), model.py (Rule, Finding, Fact), engine.py (discovery, judge, Verdict), catalog/ (the rules).
"""
