"""A key given twice in a config is an error naming the key and both lines (issue 38, class 8): before,
the last one won silently."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pointgeope.engine.config import ConfigError, load_config
from pointgeope.engine.config_yaml import DuplicateKeyError, load_yaml
from tests.engine.conftest import one_line


def test_a_key_twice_in_a_config_file_names_the_key_and_both_lines(tmp_path, capsys):
    config = tmp_path / "dup.yaml"
    config.write_text("model:\n  pe: geope\n  planes: [8, 16]\n  pe: rpe\n")
    line = one_line(capsys, 2, ["train", "--config", str(config), "--test-area", "1", "--run-dir", str(tmp_path / "r")])
    assert line == (f"pointgeope train: error: {config}: key 'model.pe' is given twice, on lines 2 and 4; keep one "
                    "of them")
    assert not (tmp_path / "r").exists()


def test_a_section_twice_and_a_key_twice_in_a_base_or_an_override(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("train:\n  epochs: 3\n# a comment\ntrain:\n  seed: 1\n")
    top = tmp_path / "top.yaml"
    top.write_text("base: base.yaml\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(base))}: key 'train' is given twice, on lines 1 and 4; "
                                          "keep one of them$"):
        load_config(top)
    with pytest.raises(ConfigError, match=r"^override 'eval.tta=\{rotations: 2, rotations: 4\}': key 'rotations' is "
                                          r"given twice, on lines 1 and 1; keep one of them$"):
        load_config(None, ["eval.tta={rotations: 2, rotations: 4}"])


def test_what_is_not_a_repeat_loads_as_safe_load_does():
    """Equal keys in different mappings, and a merge key overridden by the mapping that merges it."""
    text = "a: &m {x: 1, y: 2}\nb:\n  <<: *m\n  x: 3\nc: [{x: 1}, {x: 2}]\n"
    assert load_yaml(text) == {"a": {"x": 1, "y": 2}, "b": {"x": 3, "y": 2}, "c": [{"x": 1}, {"x": 2}]}
    with pytest.raises(DuplicateKeyError) as err:
        load_yaml("c:\n  - {x: 1}\n  - {x: 1, y: 0, x: 2}\n")
    assert (err.value.key, err.value.lines) == ("c[1].x", (3, 3))


def test_flatten_names_every_leaf_by_its_dotted_key():
    from pointgeope.engine.config_yaml import flatten

    plain = {"model": {"pe": "geope", "planes": [8, 16]}, "eval": {"tta": {"flips": False, "scales": [1.0]},
                                                                   "vote": "logits"}, "empty": {}, "top": 1}
    assert flatten(plain) == {"model.pe": "geope", "model.planes": [8, 16], "eval.tta.flips": False,
                              "eval.tta.scales": [1.0], "eval.vote": "logits", "top": 1}
    assert flatten(plain["eval"], "eval.") == {"eval.tta.flips": False, "eval.tta.scales": [1.0], "eval.vote": "logits"}


def test_the_report_flattens_without_importing_torch():
    # flatten's one home is light: the report, which imports no torch, uses it
    import subprocess
    import sys

    light = "import sys, pointgeope.report.settings; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", light], capture_output=True, text=True, check=True).stdout == "False\n"


@pytest.mark.parametrize("text, value, base", [("010", 8, "octal"), ("0777", 511, "octal"), ("1:30", 90, "base-60"),
                                               ("1:30.5", 90.5, "base-60")])
def test_a_number_yaml_reads_in_another_base_is_refused_at_its_line(tmp_path, text, value, base):
    """YAML 1.1 reads train.epochs: 010 as 8 and 1:30 as 90: the run trained 8 epochs without a word."""
    key = "optim:\n  lr" if isinstance(value, float) else "train:\n  epochs"
    config = tmp_path / "c.yaml"
    config.write_text(f"# a run\n{key}: {text}\n")
    said = (f"{text!r} is a YAML 1.1 {base} number, read as {value}: write {value} if that is meant (or quote "
            f"{text!r} for text)")
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert str(err.value) == f"{config}:3: {said}"
    name = "optim.lr" if isinstance(value, float) else "train.epochs"
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"{name}={text}"])
    assert str(err.value) == f"override '{name}={text}': {said}"


def test_numbers_in_their_plain_forms_are_read_as_before():
    assert load_yaml("a: [0, 10, 0x10, 1_000, 0.5, 1.0e-4, 00.5, -3]\nb: cuda:1\nc: '010'\n") == {
        "a": [0, 10, 16, 1000, 0.5, 1.0e-4, 0.5, -3], "b": "cuda:1", "c": "010"}


@pytest.mark.parametrize("text, line, column, name, code", [
    ("optim:\n  lr:\u00a00.1\n", 2, 6, "no-break space", "00A0"),      # read as the text 'lr:\xa00.1'
    ("optim:\n\u00a0 lr: 0.1\n", 2, 1, "no-break space", "00A0"),      # no indentation: optim was null
    ("optim:\n  lr\u200b: 0.1\n", 2, 5, "zero width space", "200B"),   # an unknown key 'optim.lr\u200b'
    ("train:\n  run_dir: runs/x\u00a0# mine\n", 2, 18, "no-break space", "00A0"),  # no comment: the folder
])
def test_an_invisible_space_is_named_at_its_line_and_column(tmp_path, text, line, column, name, code):
    """A no-break space pasted from a web page: 'expected a mapping for optim, got None' at line 1 before."""
    config = tmp_path / "c.yaml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert str(err.value) == (f"{config}:{line}: column {column} holds a {name} (U+{code}), which YAML does not read "
                              "as a space (pasted from a web page or a PDF?): type a plain space there, or delete it")


def test_invisible_spaces_in_comments_and_a_leading_byte_order_mark_are_read():
    assert load_yaml("\ufeff# Remarque\u00a0: taux\noptim:\n  lr: 0.1  # taux\u00a0: 0,1\n") == {"optim": {"lr": 0.1}}


def test_aliases_of_aliases_and_an_alias_in_its_own_anchor_are_read_at_once(tmp_path):
    """The walk that gives every key its line followed each alias into its anchor again: twelve levels of
    nine aliases (9^12 entries) hung the command, and an alias inside its own anchor raised RecursionError
    (a traceback). Each is now read once, and the config's own check names the key."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 12)))
    script = ("import sys; from pointgeope.engine.config import ConfigError, load_config\n"
              "try:\n    load_config(sys.argv[1])\nexcept ConfigError as err:\n    print(err)")
    done = subprocess.run([sys.executable, "-c", script, str(bomb)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.stdout.startswith(f"{bomb}:1: unknown key 'a0'; known keys: data, model"), done.stderr[-2000:]
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  planes: &a [*a]\n")
    with pytest.raises(ConfigError, match=re.escape(str(path)) + r":2: model.planes\[0\]: expected int, got "
                                          r"\[\[\.\.\.\]\] \(list\)"):
        load_config(path)
    path.write_text("model:\n  planes: &p [32, 64, 128, 256, 512]\n  decoder_blocks: &b [1, 1, 1, 1, 1]\n"
                    "  blocks: *b\n")  # aliases as before
    assert load_config(path).model.blocks == [1, 1, 1, 1, 1]
    assert load_yaml("a: &a [1, 2]\nb: *a\n") == {"a": [1, 2], "b": [1, 2]}
