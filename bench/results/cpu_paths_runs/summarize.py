"""Summarises the before/after runs of bench/bench_cpu_paths.py in this folder: python summarize.py OUT.json"""
import glob
import json
import sys
from pathlib import Path

rows = {}
for f in sorted(glob.glob(str(Path(__file__).parent / "ab_*_*t_r*.json"))):
    d = json.load(open(f))
    key = (d["label"], d["threads"])
    for pe, r in d["presets"].items():
        for m, v in r.items():
            rows.setdefault((pe, d["threads"], m), {}).setdefault(d["label"], []).append(v)
out = {"what": "one PointTransformerLayer (C=64, k=16, share_planes 8), synthetic room of 16k points, CPU: "
               "process CPU seconds, minimum over 3 reps per run; runs of the tree before issue 20 (2120352) and "
               "after (this branch) alternated, 'rounds' runs each; ratio = after / before of the minima over runs",
       "machine": "shared 2-core CPU, load average ~10 (other helpers jobs): CPU time, not wall. Rounds 1-3 "
                  "alternate before/after for rpe, geope, lingeope at 1 and 2 threads; rounds 4-5 (2 threads, rpe and "
                  "lingeope) run after first; rounds 6-8 (2 threads, lingeope, 5 reps) again before first. At 2 "
                  "threads the same code swings by up to 2x between runs (lingeope train 2.95-5.35 s before, "
                  "2.95-6.30 s after), so 1 thread is the reliable comparison; the CPU path differs from before only "
                  "by one environment lookup per layer call",
       "rows": []}
for (pe, th, m), v in sorted(rows.items()):
    if "before" in v and "after" in v:
        b, a = min(v["before"]), min(v["after"])
        out["rows"].append({"preset": pe, "threads": th, "measure": m, "before_s": round(b, 4), "after_s": round(a, 4),
                            "ratio": round(a / b, 3), "rounds": min(len(v["before"]), len(v["after"]))})
json.dump(out, open(sys.argv[1], "w"), indent=1)
for r in out["rows"]:
    print(f"{r['preset']:<9} {r['threads']}t {r['measure']:<8} before {r['before_s']:.3f}  after {r['after_s']:.3f}  "
          f"ratio {r['ratio']:.3f}  n={r['rounds']}")
