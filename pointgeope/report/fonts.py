"""The fonts of the report's figures: matplotlib's default (DejaVu Sans) has no Chinese, Japanese or Korean glyph, so
a run named ``基线`` (``--names``, or its folder's name) or a network's own class names in such a script were drawn as
boxes. The figures draw with the default first, then the installed fonts that hold the characters it lacks (matplotlib
takes each glyph from the first font of the list that has it; a family of the list that is not installed would be a
warning of its own, so only installed ones are listed). The well-known CJK fonts are tried first (Noto Sans CJK,
Source Han Sans, WenQuanYi, Microsoft YaHei, PingFang, Hiragino...), then any other installed one, by name; a font's
characters are read from its character map, only while some are still missing. Characters no installed font holds
are named in one warning, with the font to install; matplotlib's warning per glyph and per drawing is then silenced.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Iterable, Iterator

# tried first, in this order, where installed (Linux, Windows, macOS)
KNOWN = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK KR", "Noto Sans CJK TC", "Source Han Sans SC",
         "Source Han Sans", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback", "Microsoft YaHei",
         "SimHei", "Yu Gothic", "Malgun Gothic", "PingFang SC", "Hiragino Sans GB", "Hiragino Sans",
         "Apple SD Gothic Neo", "Arial Unicode MS", "Noto Sans SC", "Noto Sans JP", "Noto Sans KR")
# matplotlib's own stand-in, whose every glyph is a box
_STAND_IN = "Last Resort"


@functools.cache
def _characters(path: str) -> frozenset[int]:
    """The code points the font file ``path`` holds a glyph for (its character map; empty where unreadable)."""
    from matplotlib import ft2font

    try:
        return frozenset(ft2font.FT2Font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


def _installed() -> list[tuple[str, str]]:
    """``(family, file)`` of matplotlib's installed fonts, one file per family: :data:`KNOWN` first, in its order,
    then the others by name; not matplotlib's stand-in (:data:`_STAND_IN`)."""
    from matplotlib import font_manager

    files: dict[str, str] = {}
    for entry in sorted(font_manager.fontManager.ttflist, key=lambda e: (e.name, e.weight != 400, e.fname)):
        if not entry.name.startswith(_STAND_IN):
            files.setdefault(entry.name, entry.fname)
    order = {name: i for i, name in enumerate(KNOWN)}
    return sorted(files.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))


def figure_fonts(texts: Iterable[str]) -> tuple[list[str], str]:
    """``(families, missing)``: the font families that draw ``texts`` (the default's, then each installed font, in
    :func:`_installed`'s order, that holds a character none before it holds) and the characters no installed font
    holds, in the order of their first use (``""``: none)."""
    from matplotlib import font_manager

    default = font_manager.findfont(font_manager.FontProperties())
    families = [font_manager.get_font(default).family_name]
    wanted = dict.fromkeys(c for text in texts for c in text if not c.isspace() and ord(c) not in _characters(default))
    if wanted:
        for family, path in _installed():
            held = {c for c in wanted if ord(c) in _characters(path)}
            if held and family not in families:
                families.append(family)
                wanted = {c: None for c in wanted if c not in held}
            if not wanted:
                break
    return families, "".join(wanted)


def missing_line(missing: str) -> str:
    """The warning that the figures cannot draw the characters ``missing``, and what to install."""
    from matplotlib import get_cachedir

    from pointgeope.plural import first_of

    shown = first_of(missing, 10, " ")
    return (f"warning: no installed font has the characters {shown} of the run or class names: the figures draw "
            "them as boxes (the tables hold them); install a font that has them (for Chinese, Japanese and Korean: "
            "Noto Sans CJK, the package fonts-noto-cjk on Debian and Ubuntu), delete matplotlib's font list "
            f"({get_cachedir()}/fontlist-*.json) so that it finds the font, and run report again")


@contextlib.contextmanager
def drawing_fonts(texts: Iterable[str]) -> Iterator[None]:
    """Within: matplotlib draws with :func:`figure_fonts` of ``texts``; what it lacks is said once on stderr
    (:func:`missing_line`), and matplotlib's own warning of each missing glyph silenced."""
    import matplotlib

    families, missing = figure_fonts(texts)
    if missing:
        print(missing_line(missing), file=sys.stderr)
    with matplotlib.rc_context({"font.family": families}), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font", category=UserWarning)
        yield
