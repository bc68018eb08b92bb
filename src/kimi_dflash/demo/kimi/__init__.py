"""The miniature Kimi K2.6 demo bundles (docs/demo-models.md, "The miniature Kimi K2.6"); see layout.py."""
