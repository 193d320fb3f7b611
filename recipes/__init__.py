"""Hydra training, evaluation and benchmark recipes (installed as ``torchrl_warp.recipes``)."""
