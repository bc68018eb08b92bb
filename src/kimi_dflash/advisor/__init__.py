"""Speculative-token advisor: predict tok/s for every number of speculative tokens k from a few measured runs.

model  the prediction (pure): acceptance per position, step-time fit, predicted tok/s, recommendation
cli    payload/advise_spec_tokens.py
"""
