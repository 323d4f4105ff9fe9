"""Write notebooks/example_oom_trace.json, the saved GPU trace memory_leaks.ipynb shows on a
machine without a GPU: the %%gpu_trace report of the real out-of-memory snapshot that
tools/record_cuda_snapshots.py recorded (tests/fixtures/cuda_snapshots/oom.pickle and its
manifest.json), labelled with the GPU and torch it was recorded with.

`python tools/trace_example.py` writes it; `--check` exits 1 if the file is not what the
fixtures give (CI), or 0 with a note when the fixtures hold no out-of-memory run.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FIXTURES = ROOT / "tests" / "fixtures" / "cuda_snapshots"
EXAMPLE = ROOT / "notebooks" / "example_oom_trace.json"
SCENARIO = "oom"


def example(fixtures: Path = FIXTURES) -> Optional[dict]:
    """The example's JSON data, or None when the recorded scenario did not run out of
    memory (a GPU big enough for its batch)."""
    from colab_gpu_guard.trace import SavedCell, saved_report

    manifest = json.loads((fixtures / "manifest.json").read_text())
    scenario = manifest["scenarios"][SCENARIO]
    facts = scenario["facts"]
    if not facts.get("oom_calls"):
        return None
    with open(fixtures / scenario["pickle"], "rb") as file:
        snapshot = pickle.load(file)
    sources = {cell["execution_count"]: cell["source"] for cell in scenario["cells"]}
    cells = {
        name: SavedCell(number, sources[number]) for name, number in facts["file_names"].items()
    }
    report = saved_report(snapshot, cells)
    label = (
        f"A saved trace, not this machine's: recorded on an {manifest['gpu']} with torch "
        f"{manifest['torch']} by tools/record_cuda_snapshots.py (its cells 3 and 4: a model, "
        "then a batch too large for it)."
    )
    return {"label": label, "report": report.to_dict()}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    data = example()
    if data is None:
        print(f"{FIXTURES}: the {SCENARIO} scenario did not run out of memory; nothing to write")
        return 0
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.check:
        if not EXAMPLE.exists() or EXAMPLE.read_text() != text:
            print(f"{EXAMPLE} is out of date: run python tools/trace_example.py")
            return 1
        return 0
    EXAMPLE.write_text(text)
    print(f"wrote {EXAMPLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
