"""Where guesses come from: a draft model, prompt lookup, the hybrid of the two, llama.cpp (proposers of the
interface in playground.core.proposal), the registry that builds them by name, and the controllers that
choose k per iteration (adaptive, transformers' heuristic).
"""
