"""MkDocs hook: fills the configuration page's ``<!-- config-keys -->`` marker with the table of every config
key, generated from the config itself (``pointgeope.engine.config_reference``), so the page cannot drift."""
from __future__ import annotations

from mkdocs.exceptions import PluginError

MARKER = "<!-- config-keys -->"
PAGE = "configuration.md"


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"{PAGE}: expected the marker {MARKER} where the table of config keys goes")
    from pointgeope.engine.config_reference import markdown_tables

    return markdown.replace(MARKER, markdown_tables())
