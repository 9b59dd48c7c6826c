"""Sphinx configuration of the course website (`make site`).

The sources are not the repository itself: `tools/build_site.py` stages README.md
(as the landing page), the notebooks, the student labs and the figures into
`_build/site-src/`, adds a header to each page (where the notebook lives and how to
run it), executes the notebooks there, and then runs Sphinx with this configuration.
Nothing is downloaded at build or view time: the theme's assets ship with its package
and MathJax comes from the `sphinx-mathjax-offline` package.
"""

import os

project = "FlashAttention, step by step"
author = "The flashcourse authors"
copyright = "the flashcourse authors, MIT licence"

extensions = ["myst_nb", "sphinx-mathjax-offline"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
suppress_warnings = ["myst.header"]

# MyST: $...$ and $$...$$ maths as in the notebooks; headings get anchors for links
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

# Notebooks: tools/build_site.py executes them before Sphinx runs (on the CPU: the
# simulator and the recorded H200 results stand in for a GPU), in kernels with Jupyter's
# inline matplotlib backend, so their figures are outputs; Sphinx renders the stored
# outputs and executes nothing. Labs are shown as the learner receives them.
nb_execution_mode = "off"
nb_merge_streams = True
# No widget JavaScript from a CDN: widgets render as still pictures in static mode
# (FLASHCOURSE_STATIC_SITE, set by tools/build_site.py while the notebooks execute).
nb_ipywidgets_js = {}

html_theme = "sphinx_book_theme"
html_title = project
html_static_path = ["_static"]
html_css_files = ["course.css"]      # figures at full width, no sideways scroll
html_favicon = "favicon.svg"
html_show_sourcelink = False
html_copy_source = True          # the .ipynb behind the download button
html_theme_options = {
    "use_download_button": True,          # the .ipynb of each page, for running it locally
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "pygments_light_style": "default",
}
repo = os.environ.get("FLASHCOURSE_REPO_URL", "")
if repo:
    html_theme_options.update({"repository_url": repo, "use_repository_button": True,
                               "path_to_docs": "", "repository_branch": "main"})
# MathJax on every page: the navigation bar shows notebook titles with maths in them.
html_context = {"default_mode": "light"}


def setup(app):
    app.set_html_assets_policy("always")
