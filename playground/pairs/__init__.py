"""Model pairs: the loaded pair (models), how a pair loads (loading), the named pairs and the policy on which
models may load (registry), and what is asked of the Hugging Face hub, locally (hub).
"""
