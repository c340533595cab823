"""Sphinx configuration of the compendium's book (``make book``; see ``compendium.book``).

The pages are staged by ``python -m compendium.book`` into ``build/book/src/`` and rendered
with this configuration into ``build/book/html/``. Nothing is executed (the notebooks are the copies
executed by the last run) and nothing is loaded from the network: MathJax is served from the
book's own ``_static/`` folder (sphinx-mathjax-offline) and notebook widgets are not scripted.
"""
project = "ProtoT × ACC++ compendium"
author = "the compendium's authors"
copyright = "the compendium's authors"

extensions = [
    "myst_nb",
    "sphinx-mathjax-offline",   # copies MathJax 3 into _static/mathjax and points mathjax_path there
]

# --- notebooks: render the executed copies as they are
nb_execution_mode = "off"
nb_ipywidgets_js = {}           # no widget manager scripts (they would come from a CDN)
nb_mime_priority_overrides = [  # a widget view cannot render offline: show its text fallback instead
    ("html", "application/vnd.jupyter.widget-view+json", None),
    ("html", "application/vnd.jupyter.widget-state+json", None),
]
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "fieldlist", "deflist"]
myst_heading_anchors = 3

# --- HTML
html_theme = "sphinx_book_theme"
html_title = "ProtoT × ACC++ compendium"
html_static_path = ["_static"]
html_css_files = ["compendium.css"]
html_js_files = ["compendium.js"]  # tells the framed circuit viewers the page's colour theme
html_last_updated_fmt = None
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "navigation_with_keys": False,
}
html_show_sphinx = False
html_context = {"default_mode": "light"}   # the theme's colour mode until a reader picks one
exclude_patterns = [".doctrees", "**/.ipynb_checkpoints"]
suppress_warnings = [
    "misc.highlighting_failure",  # a notebook output cell with an unusual lexer is shown as plain text
    "myst.header",                # CLAIMS.md and notebooks may skip heading levels
]


def setup(app):
    # SVG output draws glyphs as paths: no web fonts, so maths also renders from file:// pages,
    # where a browser refuses font files from other file:// locations. This runs after the
    # extensions' own setup (which set the CHTML build), so it wins.
    app.config.mathjax_path = "mathjax/tex-svg.js"
