"""What the verifiers share and are not verifiers themselves: normalisers, shell words and programs, the shell
command of an action, call targets, the judge's prompt and cache, the worlds and task states at pivots, the
whole-turn pairing, the information rule. Nothing here registers a verifier (the catalog imports only the
package's top-level modules)."""
