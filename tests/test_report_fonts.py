"""A run named in Chinese (``report --names 基线 GeoPE``) was drawn as boxes in the figures, with matplotlib's
"Glyph 22522 missing from font(s) DejaVu Sans" warning four times and more: its default font has no CJK glyph. The
figures now fall back to an installed font that has them, and where none has, say so once with the font to install.

No test depends on the fonts of the machine: matplotlib's list of installed fonts is replaced by its DejaVu fonts,
with or without a CJK font the test builds (fontTools, a dependency of matplotlib) holding 基 and 线."""
from __future__ import annotations

import io
import warnings
from contextlib import redirect_stdout

import matplotlib
import pytest
from matplotlib import font_manager

from pointgeope import cli
from pointgeope.report.fonts import figure_fonts
from tests.test_report import make_runs

FAMILY = "PointGeoPE Test CJK"
NAMES = "基线"


def _cjk_font(path) -> str:
    """A TrueType font of the family :data:`FAMILY` holding U+57FA 基 (a square) and U+7EBF 线 (a bar)."""
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    def box(inset: int):
        pen = TTGlyphPen(None)
        for point in ((inset, 0), (inset, 800), (1000 - inset, 800), (1000 - inset, 0)):
            (pen.lineTo if pen.points else pen.moveTo)(point)
        pen.closePath()
        return pen.glyph()

    glyphs = [".notdef", "uni57FA", "uni7EBF"]
    builder = FontBuilder(1000, isTTF=True)
    builder.setupGlyphOrder(glyphs)
    builder.setupCharacterMap({0x57FA: "uni57FA", 0x7EBF: "uni7EBF"})
    builder.setupGlyf({".notdef": TTGlyphPen(None).glyph(), "uni57FA": box(100), "uni7EBF": box(300)})
    builder.setupHorizontalMetrics({name: (1000, 0) for name in glyphs})
    builder.setupHorizontalHeader(ascent=800, descent=-200)
    builder.setupNameTable({"familyName": FAMILY, "styleName": "Regular"})
    builder.setupOS2()
    builder.setupPost()
    builder.save(str(path))
    return str(path)


@pytest.fixture(params=[False, True], ids=["no CJK font", "a CJK font"])
def fonts(request, tmp_path, monkeypatch):
    """matplotlib's installed fonts: its DejaVu ones, and the test's CJK font where the parameter says."""
    manager = font_manager.fontManager
    listed = [entry for entry in manager.ttflist if entry.name.startswith("DejaVu")]
    if request.param:
        listed.append(font_manager.FontEntry(fname=_cjk_font(tmp_path / "cjk.ttf"), name=FAMILY, weight=400))
    monkeypatch.setattr(manager, "ttflist", listed)
    manager._findfont_cached.cache_clear()
    yield request.param
    manager._findfont_cached.cache_clear()


def _missing_glyph_warnings(family: list[str]) -> list[str]:
    """matplotlib's own warnings of the glyphs it lacks, drawing :data:`NAMES` with the families ``family``."""
    import matplotlib.pyplot as plt

    matplotlib.use("Agg", force=True)
    with warnings.catch_warnings(record=True) as caught, matplotlib.rc_context({"font.family": family}):
        warnings.simplefilter("always")
        fig = plt.figure()
        fig.text(0.5, 0.5, NAMES)
        fig.savefig(io.BytesIO(), format="png")
        plt.close(fig)
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_the_families_draw_every_character_where_a_font_has_them(fonts):
    """By matplotlib's own account (its warning per missing glyph): the default alone lacks both characters; the
    families chosen lack none where the CJK font is installed, and say both are missing where it is not."""
    default = font_manager.get_font(font_manager.findfont(font_manager.FontProperties())).family_name
    assert len(_missing_glyph_warnings([default])) == 2
    families, missing = figure_fonts(["GeoPE", NAMES, "ceiling"])
    if fonts:
        assert (families, missing) == ([default, FAMILY], "")
        assert _missing_glyph_warnings(families) == []
    else:
        assert (families, missing) == ([default], NAMES)


def test_latin_names_need_no_other_font(fonts):
    assert figure_fonts(["rpe", "GeoPE", "Área", "ceiling"])[1:] == ("",)
    assert len(figure_fonts(["rpe", "GeoPE", "Área", "ceiling"])[0]) == 1


def test_report_with_a_cjk_run_name_warns_once_or_not_at_all(fonts, tmp_path, capsys):
    """Before: no line of pointgeope's, and matplotlib's glyph warning per character and figure (boxes drawn)."""
    rpe, geope = make_runs(tmp_path)
    with warnings.catch_warnings(record=True) as caught, redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        assert cli.main(["report", str(rpe), str(geope), "--names", NAMES, "GeoPE", "--out", str(tmp_path / "o")]) == 0
    assert [str(w.message) for w in caught if "missing from font" in str(w.message)] == []
    err = capsys.readouterr().err.splitlines()
    if fonts:
        assert err == []
    else:
        assert err == [f"warning: no installed font has the characters 基 线 of the run or class names: the figures "
                       "draw them as boxes (the tables hold them); install a font that has them (for Chinese, Japanese "
                       "and Korean: Noto Sans CJK, the package fonts-noto-cjk on Debian and Ubuntu), delete "
                       f"matplotlib's font list ({matplotlib.get_cachedir()}/fontlist-*.json) so that it finds the "
                       "font, and run report again"]
    assert (tmp_path / "o" / "iou_per_class.png").read_bytes().startswith(b"\x89PNG")


def test_the_warning_names_ten_missing_characters_and_counts_the_others():
    """Twelve characters no font holds: the first ten, space-separated, then "and 2 more" (the count of the rest)."""
    from pointgeope.report.fonts import missing_line

    line = missing_line("一二三四五六七八九十百千")
    assert line.startswith("warning: no installed font has the characters 一 二 三 四 五 六 七 八 九 十 and 2 more of ")
    assert "百" not in line and "千" not in line
    assert missing_line("一二").startswith("warning: no installed font has the characters 一 二 of the run ")
