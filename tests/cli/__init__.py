"""The mongosched command."""
