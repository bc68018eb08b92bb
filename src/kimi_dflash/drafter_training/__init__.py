"""Training a DFlash drafter matched to its target: train-drafter.sh (pipeline.py) and its phases."""
