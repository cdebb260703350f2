"""Sphinx configuration of the ringsim book (built by ``python book/build.py``).

The sources are staged by ``build.py`` into ``book/_build/src``: the executed lesson notebooks and
the index. Everything a page loads comes from ``_static`` (MathJax and the widget manager are
vendored from npm by ``build.py``), so the book reads offline.
"""

project = "ringsim"
author = "the ringsim authors"
copyright = "the ringsim authors, MIT licence"
html_title = "Ring Attention, step by step"

extensions = ["myst_nb"]
exclude_patterns = ["**.ipynb_checkpoints"]

# -- MyST / notebooks --------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist", "html_image"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # build.py executed the notebooks (cached, raising on errors)
nb_execution_raise_on_error = True
nb_output_stderr = "warn"  # with -W, anything a lesson prints to stderr fails the build
nb_merge_streams = False  # a table displayed between two prints stays between them
nb_render_markdown_format = "myst"  # exercises and references print MyST (math, <details>)
nb_ipywidgets_js = {
    "vendor/require.js": {},
    "vendor/embed-amd.js": {"data-jupyter-widgets-cdn": "_static/vendor/"},
}

# -- HTML --------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_static_path = ["_static", "_build/generated"]  # generated: explorer data
html_css_files = ["lessons.css"]
html_js_files = ["lessons.js"]  # a click opens a figure alone
html_show_sourcelink = False
html_copy_source = True  # the download button offers the executed .ipynb
mathjax_path = "vendor/mathjax/tex-chtml.js"
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": False,
}
