"""Randomized fault simulations (a few hundred runs here; make soak runs more)."""
