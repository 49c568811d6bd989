"""Names vulture reports unused that are used: each is called by someone else's code, with its reason.

tests/house/test_dead_code.py passes this file to vulture beside the library folders; it is never imported.
"""
# ruff: noqa

frame  # experiments/stage_clock.py: a signal handler's signature is (signum, frame)
data_source  # integrations/verl.py compute_score: veRL passes its reward function's arguments by keyword
