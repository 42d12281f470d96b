"""Benchmark: what a ``pointgeope`` command costs to start, this checkout against an older commit's, in alternating
processes.

``--base-ref`` (a commit of this repository) is unpacked with ``git archive`` into a temporary folder; each round runs
every case once per side (``PYTHONPATH`` the side's tree, the order alternating round by round) and reads the CPU
seconds (user + system) of the process and its children from ``os.wait4``, beside its wall seconds. The cases
(:data:`CASES`) are command lines that end before any work: ``--help``, a config with a misspelt value (``train``,
``ablate``: exit code 2), and the import of each command's implementation, which every real run pays before its
first step (``train``, ``evaluate``, ``predict``: the suite's trial and stop tests start many). A side's figure
is its minimum over the rounds, beside the median and range of its per-round ratios to the base (paired). Each
side must import the package from its own tree (else both would time one code: the run stops). ``OMP_NUM_THREADS``
is each of ``--threads`` in turn. The JSON carries ``bench_io.provenance`` and the load average at the end.

Usage: python bench/bench_command_start.py --base-ref main --out bench/results/bench_command_start.json
       [--threads 1 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

BAD_CONFIG = "model:\n  pe: geopee\n"  # a misspelt value: train and ablate refuse it, exit code 2
# name -> the arguments of ``python`` ({bad}: the bad config, {tmp}: a scratch folder); the last line of each
# prints the folder pointgeope was imported from (checked to be the side's).
WHERE = "import pointgeope, sys; print(pointgeope.__file__, file=sys.stderr)"
MAIN = f"{WHERE}; from pointgeope.cli import main; raise SystemExit(main({{}}))"  # {} the command line
CASES = {
    "help": ["-c", MAIN.format(["--help"])],
    "train --help": ["-c", MAIN.format(["train", "--help"])],
    "train, a misspelt config": ["-c", MAIN.format(["train", "--config", "{bad}", "--test-area", "1"])],
    "ablate, a misspelt config": ["-c", MAIN.format(["ablate", "--config", "{bad}", "--test-area", "1", "--run-dir",
                                                     "{tmp}/ab", "--presets", "rpe,geope", "--seeds", "0"])],
    "train's imports": ["-c", f"{WHERE}; import pointgeope.engine.train"],
    "evaluate's imports": ["-c", f"{WHERE}; import pointgeope.engine.evaluate"],
    "predict's imports": ["-c", f"{WHERE}; import pointgeope.engine.predict"],
}


def run_case(tree: Path, argv: list[str], threads: int) -> dict:
    """One process of a case under ``tree``'s package: its CPU and wall seconds and the package's folder."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *argv], env=env, cwd=tree, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    package = next((line for line in err.splitlines() if line.endswith("__init__.py")), "")
    if not Path(package).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"expected the side of {tree} to import pointgeope from it, got {package!r}: {err[-500:]}")
    return {"cpu_seconds": usage.ru_utime + usage.ru_stime, "wall_seconds": wall, "exit_code": proc.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-ref", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    import interleave
    from bench_io import provenance, save_json

    base_commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.base_ref], capture_output=True,
                                 text=True, check=True).stdout.strip()
    result = {"base": base_commit, "provenance": provenance(args.threads, ("numpy", "torch", "torch_geometric",
                                                                           "scipy"), tree=ROOT),
              "rounds": args.rounds, "unit": "CPU seconds of the process and its children (os.wait4)", "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", base_commit], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        (Path(tmp) / "bad.yaml").write_text(BAD_CONFIG)
        trees = {"base": base, "new": ROOT}
        for threads in args.threads:
            for case in args.cases:
                argv = [a.replace("{bad}", str(Path(tmp) / "bad.yaml")).replace("{tmp}", tmp) for a in CASES[case]]
                rows = {side: [] for side in trees}
                for r in range(args.rounds):
                    for side in (("base", "new") if r % 2 == 0 else ("new", "base")):
                        rows[side].append(run_case(trees[side], argv, threads))
                cpu = {side: [row["cpu_seconds"] for row in rows[side]] for side in trees}
                wall = {side: [row["wall_seconds"] for row in rows[side]] for side in trees}
                paired = interleave.paired(cpu, "base")
                key = f"{case}, {threads} thread{'s' * (threads > 1)}"
                result["cases"][key] = {
                    side: {"cpu_seconds": paired[side]["min_s"], "all_cpu_seconds": [round(t, 3) for t in cpu[side]],
                           "wall_seconds": min(wall[side]), "paired_median": paired[side]["paired_median"],
                           "paired_range": paired[side]["paired_range"],
                           "exit_codes": sorted({row["exit_code"] for row in rows[side]})}
                    for side in trees} | {"load_average_end": list(os.getloadavg())}
                save_json(args.out, result)
                print(json.dumps({key: {side: (round(result["cases"][key][side]["cpu_seconds"], 2),
                                               result["cases"][key][side]["exit_codes"]) for side in trees}}),
                      flush=True)


if __name__ == "__main__":
    main()
