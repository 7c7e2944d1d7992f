"""The Django and Flask integrations."""
