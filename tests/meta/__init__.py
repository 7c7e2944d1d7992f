"""The project itself: its import structure, its README and docs, its test support."""
