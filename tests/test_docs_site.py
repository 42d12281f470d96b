"""The documentation site as a reader gets it: the docstrings' reST becomes Markdown (docs/hooks/rest_docstrings.py),
and the built site, opened from disk in headless Chromium, shows no raw reST, typesets its formulas with the
bundled KaTeX, finds ``grid_size`` with its search box and requests nothing but its own files.

The site test builds the site (mkdocs build --strict, a few seconds) and needs the docs extra and Chromium: it is
skipped without them, unless POINTGEOPE_DOCS_CHECK=1 (CI's .ci/run after ``make docs``), where a missing piece
fails it.
"""
from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chromium import Chromium

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("rest_docstrings", REPO / "docs/hooks/rest_docstrings.py")
rest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rest)

KNOWN = {"GeoPE": "pointgeope.geope.GeoPE", "pointgeope.geope.GeoPE": "pointgeope.geope.GeoPE",
         "pointgeope.geope": "pointgeope.geope"}
# reST that must not reach a page: a role (raw, or rendered by Markdown as ':func:' before a code span), a
# directive (.. math::, .. note:: ...), a reST link
RAW_REST = re.compile(r"(?<![\w:/]):(?:py:)?[a-z]+:(?=[`~\w])|\.\. [\w-]+::|`[^`\n]*<https?://[^>]+>`__?")
# the page's horizontal overflow, its tables wider than their box, those of them that scroll, code cut off
WIDTHS = """(() => {
  const tables = [...document.querySelectorAll('.md-typeset__table')].filter(t => t.scrollWidth > t.clientWidth);
  const scrolls = el => /auto|scroll/.test(getComputedStyle(el).overflowX);
  const cut = [...document.querySelectorAll('.md-typeset pre > code')]
    .filter(c => c.scrollWidth > c.clientWidth && !scrolls(c));
  return [document.documentElement.scrollWidth - document.documentElement.clientWidth, tables.length,
          tables.filter(t => scrolls(t) || scrolls(t.parentElement)).length, cut.length];
})()"""
API_PAGES = ("api/geope.html", "api/model.html", "api/nn.html", "api/metrics.html", "api/data.html")


def convert(text: str) -> str:
    return rest.rest_to_markdown(text, KNOWN.get)


def test_the_raw_rest_detector_finds_each_form_and_nothing_else():
    raw = ["a :math:`x` b", "see :func:~pointgeope.geope.GeoPE", ":py:class:`A`", ".. math::", ".. note:: x",
           'the `"Point Transformer" <https://arxiv.org/abs/2012.09164>`_ paper']
    assert [bool(RAW_REST.search(text)) for text in raw] == [True] * len(raw)
    clean = ["https://arxiv.org/abs/2512.04963", "w_b, b = 0 .. n-1", "at 10:01:26", "key: value", "std::vector",
             "`code` and [link](https://x.org)"]
    assert [bool(RAW_REST.search(text)) for text in clean] == [False] * len(clean)


def test_math_roles_and_directives_become_arithmatex():
    assert convert(r"with :math:`\mathbf{R}(t)` and :math:`t_b =" "\n  s \\, p` here") == \
        r"with $\mathbf{R}(t)$ and $t_b = s \, p$ here"
    assert convert("The layer:\n\n.. math::\n    :label: eq\n\n    x = \\sum_j a_j\n    + b\n\nWith") == \
        "The layer:\n\n$$\nx = \\sum_j a_j\n+ b\n$$\n\nWith"


def test_code_blocks_and_admonitions_become_markdown():
    assert convert("Run:\n\n.. code-block:: python\n   :linenos:\n\n   x = 1\n   y = 2\n\nAfter") == \
        "Run:\n\n```python\nx = 1\ny = 2\n```\n\nAfter"
    assert convert(".. note:: Keep it.\n   On two lines.\n\nText") == \
        "!!! note\n\n    Keep it.\n    On two lines.\n\nText"
    assert convert("  .. seealso::\n\n     :func:`GeoPE`\n") == \
        '  !!! info "See also"\n\n      <autoref identifier="pointgeope.geope.GeoPE" optional>' \
        '<code>GeoPE</code></autoref>\n'
    assert convert(".. unknown:: x\n\n   body") == ".. unknown:: x\n\n   body"  # left as written


def test_cross_references_link_what_resolves_and_show_the_rest_as_code():
    assert convert(":class:`~pointgeope.geope.GeoPE`") == \
        '<autoref identifier="pointgeope.geope.GeoPE" optional><code>GeoPE</code></autoref>'
    assert convert(":obj:`GeoPE`, :mod:`pointgeope.geope`") == \
        '<autoref identifier="pointgeope.geope.GeoPE" optional><code>GeoPE</code></autoref>, ' \
        '<autoref identifier="pointgeope.geope" optional><code>pointgeope.geope</code></autoref>'
    assert convert(":func:`the module <pointgeope.geope>`") == \
        '<autoref identifier="pointgeope.geope" optional><code>the module</code></autoref>'
    # unknown names, values and expressions: code, no link
    assert convert(":func:`_scan` :obj:`None` :obj:`pos_i - pos_j` :class:`!GeoPE`") == \
        "<code>_scan</code> <code>None</code> <code>pos_i - pos_j</code> <code>GeoPE</code>"
    assert convert(":obj:`a < b`") == "<code>a &lt; b</code>"


def test_rest_links_become_markdown_links():
    assert convert('the `"Point Transformer" <https://arxiv.org/abs/2012.09164>`_ paper, `GeoPE\n'
                   '<https://arxiv.org/abs/2512.04963>`__') == \
        'the ["Point Transformer"](https://arxiv.org/abs/2012.09164) paper, [GeoPE](https://arxiv.org/abs/2512.04963)'


def test_literal_blocks_become_fenced_code():
    assert convert("Example::\n\n    M = confusion(y, p)\n\n        indented\n\nAfter.") == \
        "Example:\n\n```python\nM = confusion(y, p)\n\n    indented\n```\n\nAfter."
    assert convert("the last channels pass through::\n\n    [a b c] [d]\n") == \
        "the last channels pass through:\n\n```text\n[a b c] [d]\n```\n"
    assert convert("Expanded ::\n\n    x\n") == "Expanded\n\n```text\nx\n```\n"
    assert convert("Text.\n\n::\n\n    x\nNext") == "Text.\n\n```text\nx\n```\n\nNext"
    # a list item's block goes under the item's text
    assert convert("  - layout::\n\n      a\n      b\n  - next") == \
        "  - layout:\n\n    ```text\n    a\n    b\n    ```\n\n  - next"


def test_plain_markdown_is_left_as_it_is():
    text = "``code`` and *emphasis*, a [link](https://example.org) and `x`: nothing to do.\n\n- one\n- two"
    assert convert(text) == text


def test_the_extension_rewrites_the_parsed_docstrings_of_the_package():
    griffe = pytest.importorskip("griffe")
    extension = griffe.load_extensions(f"{REPO}/docs/hooks/rest_docstrings.py:ReSTDocstrings")
    loader = griffe.GriffeLoader(extensions=extension, docstring_parser=griffe.Parser.google,
                                 search_paths=[str(REPO)])
    loader.load("pointgeope")
    loader.resolve_aliases(implicit=False, external=False)
    conv = loader.modules_collection["pointgeope.nn.point_transformer_conv.GeoPEPointTransformerConv"]
    sections = conv.docstring.parsed
    texts = [s.value for s in sections if isinstance(s.value, str)]
    texts += [item.description for s in sections if isinstance(s.value, list) for item in s.value
              if hasattr(item, "description")]
    joined = "\n".join(texts)
    assert "$$\n\\mathbf{x}^{\\prime}_i" in joined and "$h_\\mathbf{\\Theta}$" in joined
    assert '<autoref identifier="pointgeope.geope" optional>' in joined
    assert "[\"Point Transformer\"](https://arxiv.org/abs/2012.09164)" in joined
    assert not RAW_REST.search(joined)


def _site_tools(tmp_path: Path) -> tuple[Path, str]:
    """The built site and the browser, or a skip (a failure under POINTGEOPE_DOCS_CHECK=1) without them."""
    required = os.environ.get("POINTGEOPE_DOCS_CHECK") == "1"
    browser = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    missing = [name for name, ok in (("mkdocs", importlib.util.find_spec("mkdocs")), ("chromium", browser)) if not ok]
    if missing:
        (pytest.fail if required else pytest.skip)(f"needs {' and '.join(missing)} (the docs extra, Chromium)")
    site = tmp_path / "site"
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return site, browser


def page_text(path: Path) -> str:
    """What a page shows as text: tags dropped, entities decoded (scripts and the search data left out)."""
    body = re.sub(r"<(script|style)\b.*?</\1>", "", path.read_text(), flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", body))


@pytest.mark.slow
def test_the_site_from_disk_shows_no_rest_typesets_formulas_and_searches(tmp_path):
    site, browser = _site_tools(tmp_path)
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    raw = [f"{p.relative_to(site)}: {m.group(0)!r}" for p in pages for m in RAW_REST.finditer(page_text(p))]
    assert raw == []
    with Chromium(browser) as chromium:
        chromium.record_requests()
        for page in API_PAGES:
            chromium.open((site / page).as_uri())
            formulas, typeset, errors, links = chromium.evaluate(
                "[document.querySelectorAll('.arithmatex').length,"
                " document.querySelectorAll('.arithmatex .katex').length,"
                " document.querySelectorAll('.katex-error').length,"
                " document.querySelectorAll('.md-content a.autorefs-internal').length]")
            assert (typeset, errors) == (formulas, 0), page
            if page == "api/nn.html":  # the layer's docstring: its equation, presets, shapes and :obj: links
                assert formulas >= 20 and links >= 2
            if page == "api/geope.html":  # the module docstring's bare URL of the paper is a link
                paper = "a[href='https://arxiv.org/abs/2512.04963']"
                assert chromium.evaluate(f'document.querySelectorAll("{paper}").length')
        # at 1,280 px the page never scrolls sideways: the demo's 17-column table scrolls in its own box
        chromium.open((site / "getting-started.html").as_uri())
        overflow, wide, scrolling, cut = chromium.evaluate(WIDTHS)
        assert (overflow, cut) == (0, 0) and wide >= 1 and scrolling == wide
        chromium.open((site / "index.html").as_uri())
        assert chromium.search("grid_size") >= 1
        # offline: every page, opened from disk, loads nothing from a network (Material loads Google's fonts
        # unless `font: false`, a CDN's search worker unless the iframe-worker polyfill is in the site)
        for page in pages:
            chromium.open(page.as_uri())
        chromium.evaluate("1")  # the last page's requests arrive before this answer
    assert len(chromium.requests) > len(pages)
    assert [url for url in chromium.requests if not url.startswith(("file:", "data:", "blob:"))] == []
