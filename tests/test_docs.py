"""The user documentation stays true: the runnable commands of docs/ run, the README is short and its links
resolve, and no page tells the history of the project's tracker instead of results.

A fenced block is runnable when the line just before it is ``<!-- runnable -->``; the pages of
``RUNNABLE_PAGES`` are run in that order in one folder, as a reader following the guide would (own-scans
predicts with the model that getting-started trained).
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pointgeope

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
MARKER = "<!-- runnable -->"
RUNNABLE_PAGES = ("getting-started.md", "own-scans.md")
README_MAX_LINES = 150
TWO_COMMANDS = """\
make demo   # set up (venv, packages, system libs) and run the 6-fold demo on synthetic S3DIS, ~10 min on 2 CPU cores
make test   # set up and run the test suite (display tests under xvfb-run)
"""
# Tracker numbers, branches and merge history: the history of the work, not what a user can rely on.
HISTORY = re.compile(r"\bissues? ?#?\d+|(?<![\w(/])#\d+\b|\b(?:this|main|feature|the new) branch\b|\bmerged?\b|"
                     r"\brebased?\b", re.IGNORECASE)


def runnable_blocks(text: str) -> list[str]:
    """The bodies of the fenced blocks that directly follow a ``<!-- runnable -->`` line."""
    return [m.group(1) for m in re.finditer(rf"^{re.escape(MARKER)}\n```[a-z]*\n(.*?)^```$", text, re.M | re.S)]


def test_runnable_blocks_are_found_and_only_those():
    text = f"{MARKER}\n```bash\necho one\n```\n\n```bash\necho not marked\n```\n{MARKER}\n```bash\na \\\n  b\n```\n"
    assert runnable_blocks(text) == ["echo one\n", "a \\\n  b\n"]


@pytest.mark.slow
def test_the_runnable_commands_of_the_guide_run(tmp_path):
    for name in ("train.py", "configs"):  # the pages run in the repository's root
        (tmp_path / name).symlink_to(REPO / name)
    bin_dir = str(Path(sys.executable).parent)  # pointgeope and python of this environment, this checkout's code
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": str(REPO),
           "MPLBACKEND": "Agg"}
    env.pop("DISPLAY", None)
    for page in RUNNABLE_PAGES:
        blocks = runnable_blocks((DOCS / page).read_text())
        assert blocks, f"docs/{page}: no block marked {MARKER}"
        for block in blocks:
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=300, check=False)
            assert proc.returncode == 0, f"docs/{page}:\n{block}\nexit {proc.returncode}\n{proc.stderr[-3000:]}"
    # what the pages say these commands leave behind
    assert (tmp_path / "tiny/runs/geope/area_1/metrics.json").is_file()
    assert (tmp_path / "tiny/runs/geope/report/report.md").is_file()
    assert {p.name for p in (tmp_path / "pred").iterdir()} == {"my_scan_pred.npy", "my_scan_pred.ply",
                                                               "my_scan_pred.h5", "my_scan_pred.json"}


def _slug(heading: str) -> str:
    """The anchor of a heading, as Python-Markdown's toc (and GitHub, for these headings) makes it."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_the_readme_is_short_starts_with_the_two_commands_and_its_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    first_block = re.search(r"^```bash\n(.*?)^```$", text, re.M | re.S).group(1)
    assert first_block == TWO_COMMANDS
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert len(links) >= 15
    for link in links:
        if link.startswith(("https://", "http://")):  # the paper, the data's page
            continue
        path, _, anchor = link.partition("#")
        target = REPO / path
        assert target.exists(), f"README links to {link}: no such file"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.M)
            assert anchor in {_slug(h) for h in headings}, f"README links to {link}: no such heading"


def test_user_docs_state_results_not_tracker_history():
    assert [m.group(0) for m in HISTORY.finditer("before issue 22, rerun on this branch, the merged main, #29")] \
        == ["issue 22", "this branch", "merged", "#29"]
    pages = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]
    assert len(pages) > 15
    found = [f"{p.relative_to(REPO)}: {m.group(0)!r}" for p in pages for m in HISTORY.finditer(p.read_text())]
    assert found == []


# page, example file, what the example prints
INCLUDED_EXAMPLES = [
    ("own-network.md", "own_network.py", ["layer: (1600, 64)", "attention: (2, 4, 128, 48)"]),
    ("GEOPE_SPEC.md", "geope_operator.py", ["rotated: (1000, 64) relative: (1000, 16, 64)",
                                            "linear GeoPE translation invariant: True"]),
    ("ptv3.md", "ptv3_network.py", ["logits: (500, 13)", "S3DIS network: 46,166,272 parameters"]),
]


@pytest.mark.parametrize("page, example, printed", INCLUDED_EXAMPLES)
def test_the_pages_examples_run_as_shown(tmp_path, page, example, printed, capsys, monkeypatch):
    """A page's Python example is a file of examples/ (pymdownx.snippets), which runs as a reader copies it: the
    shown part alone, as a script of its own (``__main__``, a namespace holding nothing else, so an import or
    an input it lacks is a ``NameError``), run in this process (a child paid torch's import again for nothing)."""
    assert f'```python\n--8<-- "examples/{example}:usage"\n```' in (DOCS / page).read_text()
    script = (REPO / "examples" / example).read_text()
    usage = script.split("# --8<-- [start:usage]\n")[1].split("# --8<-- [end:usage]")[0]
    assert usage.startswith("import torch\n")  # the shown part runs alone: imports, inputs and all
    (tmp_path / "snippet.py").write_text(usage)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    runpy.run_path(str(tmp_path / "snippet.py"), run_name="__main__")
    assert capsys.readouterr().out.splitlines() == printed


def test_the_patch_encodings_snippet_runs_for_each_encoding_it_names():
    """positional-encodings.md's snippet of ``qk_encoding`` (PTv3's patches), run as shown with each encoding its
    comment offers in place of ``"geope"``, on inputs of the shapes it states; a line that some encoding cannot run
    names it (``pe(q, k, ...)`` once listed ``lingeope``, whose call is a TypeError: it turns pairs)."""
    import torch

    text = (DOCS / "positional-encodings.md").read_text()
    snippet = re.search(r"^```python\n(from pointgeope\.model\.qk_encodings import .*?)^```$", text,
                        re.M | re.S).group(1)
    names = ["geope", *re.search(r'qk_encoding\("geope".*# or ([\w, -]+)$', snippet, re.M).group(1).split(", ")]
    assert set(names) == {"geope", "none", "lingeope", "rope3d", "point3drope", "pointrope"}
    B, H, L, D = 2, 3, 16, 18
    for name in names:
        code = snippet.replace('"geope"', f'"{name}"', 1)
        lines = [line for line in code.splitlines() if not re.search(rf"all but .*\b{name}\b", line)]
        torch.manual_seed(0)
        scope = {"q": torch.randn(B, H, L, D), "k": torch.randn(B, H, L, D), "v": torch.randn(B, H, L, D),
                 "coord": torch.rand(B, L, 3) * 4, "grid": torch.randint(0, 200, (B, L, 3))}
        exec("\n".join(lines), scope)  # noqa: S102 (the page's own code)
        assert scope["out"].shape == (B, H, L, D), name


def test_troubleshootings_line_of_pointgeope_info_is_the_line_info_prints(monkeypatch, capsys):
    """Troubleshooting quotes ``pointgeope info``'s line for an untested torch-geometric (it once named one
    version, 2.8.1, where info names every tested one): the quote, ``<...>`` and ``...`` standing for anything,
    matches the line info prints for a torch-geometric it was not tested with."""
    from pointgeope import info

    quote = re.search(r"^- `(PyG layer [^`]*)` \(`pointgeope info`\)", (DOCS / "troubleshooting.md").read_text(),
                      re.M).group(1)
    pattern = ".+?".join(re.escape(part).replace(re.escape("..."), ".+?") for part in re.split(r"<[^>]+>", quote))
    versions = {**info.package_versions(), "torch-geometric": "2.6.9"}
    monkeypatch.setattr(info, "package_versions", lambda: versions)
    info.print_info()
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("PyG layer"))
    assert "2.6.9, not among them" in line and re.fullmatch(pattern, line), (quote, line)


# values a key still accepts under a former name, which the pages name only as such ("beside (formerly device)")
FORMER_NAMES = {"data.hierarchy": {"device"}}


def test_the_gpu_pages_switches_list_every_value_each_key_takes():
    """gpu.md's table of switches gives a config key's values as ``| `key`: `a`, `b` |``: they are all the values
    the config accepts (its ``'a' | 'b'`` type), so a reader does not take a listed pair for the only choice
    (``train.amp`` and ``eval.amp`` once left out ``fp16``, PTv3's recipe precision)."""
    from pointgeope.engine.config_reference import config_keys

    types = {ref.key: ref.type for ref in config_keys()}
    rows = re.findall(r"^\| `([a-z_]+\.[a-z_.]+)`: ((?:`[^`]+`(?:, )?)+) \|", (DOCS / "gpu.md").read_text(), re.M)
    assert {key for key, _ in rows} >= {"train.amp", "eval.amp", "data.hierarchy", "train.cuda_graphs"}
    for key, listed in rows:
        accepted = set(re.findall(r"'([^']+)'", types[key])) or {"true", "false"}
        assert set(re.findall(r"`([^`]+)`", listed)) == accepted - FORMER_NAMES.get(key, set()), key


def test_the_benchmarks_page_names_what_make_bench_runs():
    """benchmarks.md's first sentence names the scripts of the Makefile's ``bench`` target, all of them and no
    other (it said "every benchmark in bench/", where the target runs 8 of them)."""
    make = (REPO / "Makefile").read_text()
    target = re.search(r"^bench:.*\n((?:\t.*\n)+)", make, re.M).group(1)
    runs = re.findall(r"bench/(\w+\.py)", target)
    first = (DOCS / "benchmarks.md").read_text().split("\n\n")[1]
    named = re.findall(r"`(bench_\w+\.py)`", first.split(";")[0])
    assert runs and sorted(named) == sorted(runs)


def test_the_slurm_page_makes_the_log_folder_before_it_submits():
    """SLURM opens a job's ``--output`` file in an existing folder only: the array of slurm.md, submitted as
    written without ``logs/``, ends every task at once with no log. The page makes the folder before ``sbatch``."""
    text = (DOCS / "s3dis" / "slurm.md").read_text()
    folder = re.search(r"^#SBATCH .*--output=([^\s/]+)/", text, re.M).group(1)
    submit = text.index("\nsbatch ")
    assert re.search(rf"^mkdir -p {re.escape(folder)}\b", text[:submit], re.M), folder


def test_own_network_states_geopes_range_of_frequencies():
    """own-network.md's numbers for choosing pos_scale: the slowest block's frequency as a fraction of block 0's
    (``base^(-2(n-1)/(3n))``, not RoPE's ``1 / base``) at the widths it names, and the slowest block's period
    in voxels at 64 channels (``2 pi / (w_last / 3)`` with ``pos_scale = 1 / voxel``), from
    ``pointgeope.geope.frequencies`` (base 100)."""
    import math

    from pointgeope.geope import frequencies

    text = " ".join((DOCS / "own-network.md").read_text().split())
    found = re.search(r"at base 100, 1/(\d+) of block 0 at (\d+) channels, 1/(\d+) at (\d+) and 1/(\d+) at (\d+)\.",
                      text)
    assert found, "own-network.md: the sentence with GeoPE's range of frequencies is gone"
    numbers = [int(g) for g in found.groups()]
    for fraction, channels in zip(numbers[0::2], numbers[1::2], strict=True):
        w = frequencies(channels)
        assert round(float(w[0] / w[-1])) == fraction, channels
    period = int(re.search(r"slowest block of 64 channels turns once in about (\d+) voxels", text).group(1))
    assert abs(2 * math.pi / (float(frequencies(64)[-1]) / 3) - period) < 5


def _bibtex(text: str) -> str:
    return re.search(r"^## Citing\n.*?^```bibtex\n(.*?)^```$", text, re.M | re.S).group(1)


def test_the_citation_is_the_same_everywhere():
    """README and the home page give the same BibTeX; CITATION.cff names the same papers; all cite the version
    the package says it is (`pointgeope --version`, which pyproject.toml reads)."""
    import yaml

    readme, home = _bibtex((REPO / "README.md").read_text()), _bibtex((DOCS / "index.md").read_text())
    assert readme == home
    keys = re.findall(r"^@(\w+)\{(\w+),$", readme, re.M)
    assert keys == [("misc", "yao2025geope"), ("inproceedings", "zhao2021point"), ("inproceedings", "wu2024ptv3"),
                    ("inproceedings", "armeni2016s3dis"), ("misc", "pointgeope")]
    assert readme.count("{") == readme.count("}")
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    version = pointgeope.__version__
    assert cff["cff-version"] == "1.2.0" and cff["version"] == version
    assert re.findall(r"note = \{Version ([^}]*)\}", readme) == [version]
    flat = " ".join(re.sub(r"[{}]", "", readme).split()).lower()
    for ref in cff["references"]:
        assert ref["title"].lower() in flat
    assert "arXiv:2512.04963" in str(cff["references"][0]["identifiers"]) and "eprint = {2512.04963}" in readme


# the papers' arXiv identifiers, from arxiv.org: a reader of CITATION.cff finds each paper from its entry
ARXIV = {"GeoPE: A Unified Geometric Positional Embedding for Structured Tensors": "2512.04963",
         "Point Transformer": "2012.09164", "Point Transformer V3: Simpler, Faster, Stronger": "2312.10035"}


def test_citation_cff_has_cff_1_2s_required_keys_and_each_papers_arxiv_id():
    """CFF 1.2.0: ``cff-version``, ``message``, ``title`` and ``authors`` at the top, ``type``, ``title`` and
    ``authors`` in each reference, identifiers of the schema's four types; each arXiv paper by its identifier
    and its abstract page (PTv1 and PTv3 had neither)."""
    import yaml

    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert {"cff-version", "message", "title", "authors"} <= cff.keys()
    refs = {ref["title"]: ref for ref in cff["references"]}
    for ref in refs.values():
        assert {"type", "title", "authors"} <= ref.keys() and ref["authors"], ref["title"]
        assert all(ident["type"] in ("doi", "url", "swh", "other") for ident in ref.get("identifiers", [])), ref
    for title, number in ARXIV.items():
        assert title in refs, f"CITATION.cff: no reference {title!r}"
        values = [ident["value"] for ident in refs[title].get("identifiers", [])]
        assert f"arXiv:{number}" in values and refs[title].get("url") == f"https://arxiv.org/abs/{number}", title


def _demo_table():
    spec = importlib.util.spec_from_file_location("demo_table", REPO / "bench" / "demo_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_chance_miou_is_the_miou_of_the_expected_confusion_of_uniform_guessing():
    """README's chance beside mIoU was 1/13 (uniform guessing's OA). Reference from the definition: uniform
    guessing puts n_g / C of class g's points in each column; mIoU (pointgeope.metrics; class 4, never true
    but guessed, scores 0) of that expected confusion, scaled by C to stay integer, against the script's closed form."""
    from pointgeope.metrics import scores

    demo_table = _demo_table()
    counts = np.array([250, 310, 40, 7, 0, 61, 19, 120, 88, 3, 45, 2, 900], dtype=np.int64)
    expected = np.repeat(counts[:, None], len(counts), axis=1)          # E[confusion] x C: row g is n_g
    reference = scores(expected, "present")
    assert math.isclose(demo_table.chance_miou(counts.tolist()), reference["miou"], rel_tol=1e-12)
    assert math.isclose(reference["oa"], 1 / len(counts))
    assert math.isclose(demo_table.chance_miou([1] * 13), 1 / 25)        # equal shares: 1 / (2C - 1)


def test_the_demo_block_is_regenerated_from_a_run_with_the_folds_spread(tmp_path):
    """bench/demo_table.py: the pooled and mean-of-folds rows, the lowest and highest fold, the fold times."""
    demo_table = _demo_table()
    names = ["ceiling", "floor"]
    score = lambda oa, macc, miou, iou: {"oa": oa, "macc": macc, "miou": miou, "iou": iou}  # noqa: E731
    per_fold = [{"area": f"Area_{k}", "fold": k, **score(0.8, 0.5, miou, [0.9, 0.1])}
                for k, miou in ((1, 0.512), (2, 0.466), (3, 0.5049))]
    run = {"folds_missing": [], "pooled": score(0.864, 0.576, 0.5111, [0.931, 0.0]),
           "mean_of_folds": score(0.861, 0.572, 0.503, [0.93, 0.007]), "per_fold": per_fold,
           "pooled_confusion": [[28, 2], [4, 6]]}                # 30 ceiling, 10 floor points
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "report.json").write_text(json.dumps({"class_names": names, "runs": [run]}))
    stamps = {1: ("10:00:00", "10:01:26"), 2: ("10:01:30", "10:03:19"), 3: ("10:03:20", "10:05:00")}
    for k, (start, end) in stamps.items():
        (tmp_path / f"area_{k}").mkdir()
        (tmp_path / f"area_{k}" / "log.txt").write_text(f"2026-11-27 {start} fold {k}\n2026-11-27 {end} evaluated\n")
    text = demo_table.block(tmp_path, 286.0, "abc1234", 2, "2026-11-27")
    assert "2-core CPU machine (2026-11-27, pointgeope at commit `abc1234`, torch CPU threads not recorded; " \
           "4 min 46 s in all, folds of 1 min 26 s to 1 min 49 s each)" in text
    assert "| pooled | 86.4 | 57.6 | 51.1 | 93.1 | 0.0 |" in text
    assert "| mean of folds | 86.1 | 57.2 | 50.3 | 93.0 | 0.7 |" in text
    assert "| 6-fold | OA | mAcc | mIoU | ceiling | floor |\n|:--|--:|--:|--:|--:|--:|" in text
    assert "spans 46.6 % (fold 2) to 51.2 % (fold 1)" in text
    # chance: shares 3/4 and 1/4, each guessed on half the points: IoU 3/8 / (3/4 + 1/2 - 3/8) = 3/7 and
    # 1/8 / (1/4 + 1/2 - 1/8) = 1/5, mean 22/70 = 31.4 %; OA 1/2
    assert "uniform guessing scores 31.4 % mIoU (50.0 % OA). Times" in text
    run["pooled"]["miou"] = 23 / 80       # a tie, 28.75 %: rounded as report.md rounds it (f"{100 * x:.1f}": 28.7)
    (tmp_path / "report" / "report.json").write_text(json.dumps({"class_names": names, "runs": [run]}))
    assert "| pooled | 86.4 | 57.6 | 28.8 | 93.1 | 0.0 |" in demo_table.block(tmp_path, 286.0, "abc1234", 2,
                                                                              "2026-11-27")
    page = "intro\n<!-- demo-table:start -->\nold\n<!-- demo-table:end -->\nafter\n"
    assert demo_table.replace_block(page, "new", Path("p")) == \
        "intro\n<!-- demo-table:start -->\n\nnew\n\n<!-- demo-table:end -->\nafter\n"
    for doc in demo_table.PAGES:  # the pages the script writes hold one block each
        text = doc.read_text()
        assert text.count(demo_table.START) == 1 and text.count(demo_table.END) == 1


def test_the_demo_block_names_the_folds_torch_threads_and_the_machines_load(tmp_path):
    """The demo's scores depend on torch's CPU thread count (its kernels split their sums by thread): the block
    names the count each fold's last.pt was trained with, every count where the folds differ, and, given
    ``--load``, that other work shared the cores (its times are then no quiet machine's)."""
    from pointgeope.engine.checkpoint import save_checkpoint

    demo_table = _demo_table()
    score = {"oa": 0.8, "macc": 0.5, "miou": 0.4, "iou": [0.9, 0.1]}
    run = {"folds_missing": [], "pooled": score, "mean_of_folds": score, "pooled_confusion": [[3, 1], [1, 3]],
           "per_fold": [{"area": f"Area_{k}", "fold": k, **score} for k in (1, 2)]}
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "report.json").write_text(json.dumps({"class_names": ["a", "b"], "runs": [run]}))
    for k, threads in ((1, 1), (2, 1)):
        (tmp_path / f"area_{k}").mkdir()
        save_checkpoint(tmp_path / f"area_{k}" / "last.pt", {"threads": threads})
    text = demo_table.block(tmp_path, None, "abc1234", 2, "2026-11-28", load=6.5)
    assert text.startswith("`make demo` on a 2-core CPU machine shared with other work (load average 6.5) "
                           "(2026-11-28, pointgeope at commit `abc1234`, 1 torch CPU thread; fold times not logged),")
    save_checkpoint(tmp_path / "area_2" / "last.pt", {"threads": 2})
    assert ("commit `abc1234`, torch CPU threads 1, 2 (the folds differ: their scores are not one setting's); "
            in demo_table.block(tmp_path, None, "abc1234", 2, "2026-11-28"))
    for k in (1, 2):
        save_checkpoint(tmp_path / f"area_{k}" / "last.pt", {"threads": 4})
        (tmp_path / f"area_{k}" / "metrics.json").write_text(json.dumps({"pointgeope_commit": "f" * 40}))
    assert "`fffffff`, 4 torch CPU threads; " in demo_table.block(tmp_path, None, "abc1234", 2, "2026-11-28")
    (tmp_path / "area_1" / "last.pt").unlink()
    assert ("`fffffff`, torch CPU threads not recorded for every fold; "
            in demo_table.block(tmp_path, None, "abc1234", 2, "2026-11-28"))


def test_the_demo_block_names_the_commit_its_folds_were_tested_at(tmp_path):
    """A rerun of the demo skips the folds its run folder holds complete, so the folds can be older than the
    checkout: the block named the checkout's commit (where the script ran) whatever code made the scores. It
    names the commit of each fold's metrics.json, every one where they differ, the checkout's only where the
    folds record none."""
    demo_table = _demo_table()
    score = {"oa": 0.8, "macc": 0.5, "miou": 0.4, "iou": [0.9, 0.1]}
    run = {"folds_missing": [], "pooled": score, "mean_of_folds": score, "pooled_confusion": [[3, 1], [1, 3]],
           "per_fold": [{"area": f"Area_{k}", "fold": k, **score} for k in (1, 2, 3)]}
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "report.json").write_text(json.dumps({"class_names": ["a", "b"], "runs": [run]}))
    for k in (1, 2, 3):
        (tmp_path / f"area_{k}").mkdir()
    head = lambda: demo_table.block(tmp_path, None, "abc1234", 2, "2026-11-28").splitlines()[0]  # noqa: E731
    assert "(2026-11-28, pointgeope at commit `abc1234`, torch CPU threads not recorded; " in head()
    for k, commit in ((1, "1" * 40), (2, "1" * 40), (3, "2" * 40)):
        (tmp_path / f"area_{k}" / "metrics.json").write_text(json.dumps({"pointgeope_commit": commit}))
    assert ("(2026-11-28, pointgeope folds of commits `1111111`, `2222222` (not one code's scores: train the "
            "folds again at one commit), torch CPU threads not recorded; ") in head()
    (tmp_path / "area_3" / "metrics.json").write_text(json.dumps({"pointgeope_commit": "1" * 40}))
    assert "(2026-11-28, pointgeope at commit `1111111`, torch" in head()
    # a fold whose clone's code differed from its commit: the block does not cite the commit as its code
    (tmp_path / "area_3" / "metrics.json").write_text(json.dumps({"pointgeope_commit": "1" * 40,
                                                                  "pointgeope_modified": True}))
    assert "(2026-11-28, pointgeope at commit `1111111` with uncommitted changes, torch" in head()
    (tmp_path / "area_3" / "metrics.json").write_text(json.dumps({"pointgeope_commit": None}))
    assert "(2026-11-28, pointgeope folds of commits `1111111` and unrecorded ones (not one code's" in head()


def test_each_changelog_release_names_each_kind_of_change_once():
    """Keep a Changelog's form: under a release, one ``### Added`` (``Changed``, ``Fixed``, ...) heading each,
    so a reader scanning the fixes of [Unreleased] finds them all under one heading."""
    releases = re.split(r"^## ", (REPO / "CHANGELOG.md").read_text(), flags=re.M)[1:]
    assert releases and releases[0].startswith("[Unreleased]")
    for release in releases:
        kinds = re.findall(r"^### (.+)$", release, re.M)
        assert len(kinds) == len(set(kinds)), (release.splitlines()[0], kinds)
