"""Agents: policies that sample actions at pivots (local transformers, OpenAI-compatible servers, baselines)."""
