"""Sphinx configuration for the offline minillm site (built by `tools/docs`).

The sources are the notebooks nbdev processed and `tools/docs_build.py` translated to MyST;
Quarto users get the same book from `nbs/_quarto.yml` + `nbs/sidebar.yml` with `nbdev_preview`.
"""
import configparser, os
from pathlib import Path

ROOT = Path(os.environ.get('MINILLM_ROOT', Path(__file__).resolve().parents[2]))
_cfg = configparser.ConfigParser()
_cfg.read(ROOT/'settings.ini')
_s = _cfg['DEFAULT']

project = _s.get('title', _s.get('lib_name', 'minillm'))
author = _s.get('author', '')
copyright = _s.get('copyright', '')
release = version = _s.get('version', '')

extensions = ['myst_nb', 'sphinx.ext.mathjax', 'sphinx-mathjax-offline']
root_doc = 'index'
exclude_patterns = ['_build', '**.ipynb_checkpoints', 'data/**']   # data files travel with the pages (e.g. nbs/data's README of a sample) but are not pages
source_suffix = {'.ipynb': 'myst-nb', '.md': 'myst-nb'}

# notebooks are never executed here: the site shows the outputs saved in them
nb_execution_mode = 'off'
nb_output_stderr = 'remove'
nb_merge_streams = True
nb_render_markdown_format = 'myst'
nb_mime_priority_overrides = [('html', 'application/vnd.jupyter.widget-view+json', None),
                              ('html', 'application/vnd.jupyter.widget-state+json', None)]
myst_enable_extensions = ['dollarmath', 'amsmath', 'colon_fence', 'attrs_block', 'attrs_inline',
                          'deflist', 'html_image', 'smartquotes', 'substitution']
myst_heading_anchors = 3
myst_dmath_double_inline = True

# MathJax served from _static (sphinx-mathjax-offline): no network needed to read the maths
mathjax3_config = {'tex': {'tags': 'none'}}

html_theme = 'sphinx_book_theme'
html_title = project
html_static_path = [str(Path(__file__).parent/'_static')]
html_css_files = ['minillm.css']
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    'home_page_in_toc': True,
    'show_navbar_depth': 1,
    'show_toc_level': 2,
    'use_download_button': False,
    'use_fullscreen_button': False,
    'use_repository_button': False,
    'navigation_with_keys': False,
    'search_bar_text': 'Search the book...',
}
html_context = {'default_mode': 'light'}
add_module_names = False
python_display_short_literal_types = True
toc_object_entries_show_parents = 'hide'
# Quarto accepts a heading that skips a level; so does this build
suppress_warnings = ['mystnb.unknown_mime_type', 'myst.header']
