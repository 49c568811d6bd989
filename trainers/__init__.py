"""Trainers: PivotRL GRPO, the same-data SFT baseline, and evaluation (need the ``train`` extra)."""
