"""Sphinx configuration for the mongosched documentation."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "mongosched"
author = "the mongosched developers"
copyright = "2026, the mongosched developers"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False
intersphinx_mapping: dict[str, tuple[str, None]] = {}
exclude_patterns = ["_build"]
html_theme = "alabaster"
