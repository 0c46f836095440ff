"""Sphinx configuration of arrayrope's documentation site.

Build it from the repository root (the ``docs`` extra installs what it needs)::

    pip install -e ".[docs]"
    sphinx-build -W --keep-going -b html docs docs/_build/html

Nothing on the site is copied by hand from elsewhere: the API pages come from the docstrings,
the CLI reference from the argument parsers, the conformance tables from the file that
``tests/conformance/table.py`` writes, the benchmark tables from ``bench/results`` and the
figures from the library's and the bench's own plotting code, run when the site builds.
"""

from __future__ import annotations

import pathlib
import sys

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]  # bench (the speed figure) and the figures module

import arrayrope  # noqa: E402

project = "arrayrope"
author = "arrayrope contributors"
copyright = "arrayrope contributors, MIT licence"
release = version = arrayrope.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "sphinx_copybutton",
    "figures",
    "aliases",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_includes", "_generated", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# -- MyST: README-style Markdown pages, headings linkable as page.md#heading
myst_enable_extensions = ["colon_fence", "deflist"]  # no math: pages read offline, with no MathJax to fetch
myst_heading_anchors = 4

# -- the API reference: one page per public name, from its numpydoc docstring
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
autodoc_member_order = "bysource"
numpydoc_show_class_members = False  # the class template lists the members
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
add_module_names = False
toc_object_entries_show_parents = "hide"  # the page names the class: its methods by their own names

# -- doctest (sphinx-build -b doctest): the Examples of every docstring, as the API pages show them
doctest_global_setup = "import numpy as np"
doctest_test_doctest_blocks = "default"

# -- links: other projects' inventories are not fetched (the CI machine reaches package registries only);
# the link check covers the links within the site
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}
linkcheck_ignore = [r"https?://.*"]
linkcheck_anchors = True

# -- the theme
html_theme = "pydata_sphinx_theme"
html_title = f"arrayrope {release}"
html_static_path = ["_static"]
html_css_files = ["arrayrope.css"]
html_show_sourcelink = False
html_theme_options = {
    "navigation_with_keys": False,
    "header_links_before_dropdown": 5,
    "navbar_persistent": [],
    "navbar_end": ["search-button", "theme-switcher"],
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# pages without children of their own take no section navigation: their width goes to their tables
html_sidebars = {page: [] for page in ("index", "install", "conformance", "architecture", "changelog")}
html_context = {"default_mode": "light"}
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
