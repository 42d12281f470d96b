"""Griffe extension for the API pages: the docstrings' reST/Sphinx markup becomes the Markdown that
mkdocstrings renders, when the site is built (the docstrings themselves stay as written).

mkdocs.yml loads it in mkdocstrings' Python handler (``extensions: [docs/hooks/rest_docstrings.py:ReSTDocstrings]``).
Once the package is loaded, every docstring becomes a :class:`ReSTDocstring`: when a page first renders it, it
is parsed (Google style, as configured) and the text of every section and item is rewritten by
:func:`rest_to_markdown`:

- ``:math:`x``` -> ``$x$`` and a ``.. math::`` block -> ``$$ ... $$`` (pymdownx.arithmatex, KaTeX in the page);
- ``.. code-block:: python`` -> fenced code; ``.. note::``, ``.. warning::``, ``.. seealso::`` and the other
  admonitions -> Material's admonitions;
- ``:class:``, ``:func:``, ``:meth:``, ``:attr:``, ``:mod:``, ``:data:``, ``:obj:``, ``:exc:`` -> a link to the
  object when the site documents it (an optional mkdocs-autorefs reference; names are resolved in the
  docstring's scope by Griffe), else inline code;
- ```text <url>`_`` -> ``[text](url)``;
- a paragraph ending in ``::`` (``Example::``, ``... pass through::``) and its indented block -> the paragraph
  ending in ``:`` and a fenced code block (highlighted as Python after ``Example::``, plain text otherwise).

Bare URLs become links through pymdownx.magiclink (mkdocs.yml).
"""
from __future__ import annotations

import html
import re
from collections.abc import Callable

XREF_ROLES = "class|func|meth|attr|mod|data|obj|exc|const|type"
_XREF = re.compile(rf":(?:py:)?(?:{XREF_ROLES}):`([^`]+)`")
_MATH = re.compile(r":math:`([^`]+)`")
_LINK = re.compile(r"`([^`<]*?)\s*<([^<>`\s]+)>`__?")
_NAME = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*")
_DIRECTIVE = re.compile(r"^(\s*)\.\. ([\w-]+)::\s*(.*)$")
# reST admonitions as Material's: directive -> (kind, title or None)
_ADMONITIONS = {"note": ("note", None), "warning": ("warning", None), "tip": ("tip", None), "hint": ("tip", None),
                "important": ("warning", "Important"), "attention": ("warning", "Attention"),
                "caution": ("warning", "Caution"), "danger": ("danger", None), "error": ("danger", "Error"),
                "seealso": ("info", "See also")}
_INDENT = re.compile(r"^(\s*)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s+")
_EXAMPLE_HEADS = {"example", "examples", "for example", "usage"}  # their literal block is Python code

Resolver = Callable[[str], "str | None"]


def _indent(line: str) -> int:
    return len(_INDENT.match(line).group(1))


def _take_block(lines: list[str], start: int, parent_indent: int) -> tuple[list[str], int]:
    """The lines from ``start`` indented deeper than ``parent_indent`` (blank lines inside kept), dedented,
    and the index of the first line after them; leading and trailing blank lines are dropped."""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > parent_indent):
        end += 1
    block = lines[start:end]
    while block and not block[-1].strip():
        block.pop()
    while block and not block[0].strip():
        block.pop(0)
    depth = min((_indent(line) for line in block if line.strip()), default=0)
    return [line[depth:] if line.strip() else "" for line in block], end


def _directive(name: str, argument: str, body: list[str], pad: str) -> list[str] | None:
    """The Markdown lines of a reST directive (``None``: a directive left as written)."""
    while body and re.match(r"^:[\w-]+:(\s|$)", body[0]):  # its options (:label:, :linenos: ...) go
        body.pop(0)
    while body and not body[0]:
        body.pop(0)
    if name == "math":
        return [pad + "$$", *(pad + b for b in ([argument] if argument else []) + body), pad + "$$", ""]
    if name in ("code-block", "code", "sourcecode"):
        return [pad + "```" + (argument or "text"), *(pad + b if b else "" for b in body), pad + "```", ""]
    if name in _ADMONITIONS:
        kind, title = _ADMONITIONS[name]
        head = f'{pad}!!! {kind}' + (f' "{title}"' if title else "")
        text = [argument] if argument else []
        return [head, "", *(pad + "    " + b if b else "" for b in text + body), ""]
    return None


def _blocks(text: str) -> str:
    """Directives (math, code, admonitions) and ``::`` literal blocks as arithmatex blocks, fenced code and
    Material admonitions."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line)
        literal = line.rstrip().endswith("::") and not line.lstrip().startswith("..")
        if not (directive or literal):
            out.append(line)
            i += 1
            continue
        pad = " " * _indent(line)
        body, end = _take_block(lines, i + 1, _indent(line))
        if directive:
            markdown = _directive(directive.group(2), directive.group(3).strip(), body, pad)
            out += [line] if markdown is None else markdown
            i = i + 1 if markdown is None else end
            continue
        i = end
        item = _LIST_ITEM.match(line)  # a list item's block goes under the item's text
        pad = " " * item.end() if item else pad
        head = line.rstrip()[:-2].rstrip()
        if head.strip():
            out.append(head + ("" if line.rstrip()[-3:-2].isspace() else ":"))
            out.append("")
        if body:
            lang = "python" if head.strip().lower() in _EXAMPLE_HEADS else "text"
            out += [pad + "```" + lang, *(pad + b if b else "" for b in body), pad + "```", ""]
    return "\n".join(out)


def _xref(target: str, resolve: Resolver) -> str:
    """One cross-reference role's target as an optional autorefs link (plain code when it names nothing)."""
    title, _, explicit = re.match(r"^(.*?)(\s*<([^<>]+)>)?$", target.strip()).group(1, 2, 3)
    name = (explicit or title).strip().lstrip("!")
    short = name.startswith("~")
    name = name.lstrip("~.")
    shown = html.escape(title.strip() if explicit else (name.rsplit(".", 1)[-1] if short else name))
    code = f"<code>{shown}</code>"
    if target.strip().startswith("!") or not _NAME.fullmatch(name):
        return code
    path = resolve(name)
    return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>' if path else code


def rest_to_markdown(text: str, resolve: Resolver = lambda name: None) -> str:
    """Docstring text in reST/Sphinx markup as Markdown (see the module docstring for what is rewritten).

    ``resolve`` maps a name as written in a role (``VoteSink``, ``pointgeope.geope.GeoPE``) to the full path
    of the object it names, or ``None`` when it names nothing known (then the name shows as code)."""
    text = _blocks(text)
    text = _MATH.sub(lambda m: "$" + " ".join(m.group(1).split()) + "$", text)
    text = _XREF.sub(lambda m: _xref(m.group(1), resolve), text)
    return _LINK.sub(lambda m: f"[{m.group(1) or m.group(2)}]({m.group(2)})", text)


def _rewrite_sections(sections, convert: Callable[[str], str]) -> None:
    """Every piece of text of parsed Griffe sections, rewritten in place."""
    for section in sections:
        value = section.value
        if isinstance(value, str):
            section.value = convert(value)
        elif isinstance(value, list):
            for k, item in enumerate(value):
                if isinstance(item, tuple):  # examples: (kind, text)
                    value[k] = (item[0], convert(item[1]))
                elif isinstance(getattr(item, "description", None), str):
                    item.description = convert(item.description)
        elif isinstance(getattr(value, "description", None), str):  # admonitions
            value.description = convert(value.description)


def _resolver(obj, collection) -> Resolver:
    def resolve(name: str) -> str | None:
        head, _, rest = name.partition(".")
        try:
            path = obj.resolve(head)
        except Exception:  # noqa: BLE001 (griffe's NameResolutionError and friends: an unknown name)
            path = head
        path = f"{path}.{rest}" if rest else path
        try:
            collection[path]
        except Exception:  # noqa: BLE001 (KeyError, or an alias that does not resolve)
            return None
        return path

    return resolve


def _walk(obj, collection, seen: set[int], docstring_class) -> None:
    if id(obj) in seen or obj.is_alias:
        return
    seen.add(id(obj))
    if obj.docstring is not None:
        obj.docstring.__class__ = docstring_class
        obj.docstring.rest_resolve = _resolver(obj, collection)
    for member in list(obj.members.values()):
        _walk(member, collection, seen, docstring_class)


try:
    import griffe
except ImportError:  # the converter alone (tests/test_docs.py) needs no Griffe
    griffe = None
else:
    class ReSTDocstring(griffe.Docstring):
        """A docstring whose parsed sections are rewritten by :func:`rest_to_markdown` when first asked for
        (only the docstrings a page renders are parsed, as without this extension)."""

        @property
        def parsed(self):
            if "_rest_parsed" not in self.__dict__:
                sections = self.parse()
                _rewrite_sections(sections, lambda text: rest_to_markdown(text, self.rest_resolve))
                self.__dict__["_rest_parsed"] = sections
            return self.__dict__["_rest_parsed"]

    class ReSTDocstrings(griffe.Extension):
        """Makes each docstring of a loaded package a :class:`ReSTDocstring`."""

        def on_package(self, *, pkg, loader, **kwargs) -> None:
            _walk(pkg, loader.modules_collection, set(), ReSTDocstring)
