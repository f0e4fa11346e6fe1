"""What the class-data archive (`p2panda_assets.pipeline.spark.class_archive`) saves a cold
start: pairs of the same command with the archive turned off and on, in turn, in one run.

- `session`: a new Python process starts the product's Spark session, starts its Python
  workers (`warm_up`) and runs one job.
- `demo`: `panda demo` in a new P2PANDA_HOME (its embedded PostgreSQL, two
  `panda materialize`, each a cold JVM), as the README's first command runs it.

    .venv/bin/python bench/cold_start.py [--samples 2] [--no-demo]

The last line is one JSON object: the median seconds of each and the ratios on/off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from p2panda_assets.pipeline.spark.class_archive import ARCHIVE_ENV, OFF, archive_path

PANDA = Path(sys.executable).parent / "panda"
SESSION = (
    "from p2panda_assets.pipeline.spark.session import build_session, warm_up\n"
    "spark = build_session(); warm_up(spark); spark.range(1000).selectExpr('sum(id)').collect()"
)


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    subprocess.run(command, env=env, check=True, capture_output=True)
    return time.monotonic() - start


def demo(env: dict[str, str]) -> float:
    with tempfile.TemporaryDirectory(prefix="p2panda-cold-") as home:
        env = {**env, "P2PANDA_HOME": home}
        try:
            return timed([str(PANDA), "demo"], env)
        finally:
            subprocess.run([str(PANDA), "server", "stop"], env=env, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--no-demo", action="store_true", help="only the session's start")
    args = parser.parse_args()
    archive = archive_path()
    if archive is None or not archive.is_file():
        sys.exit(
            "no class archive: run"
            " `.venv/bin/python -m p2panda_assets.pipeline.spark.class_archive`"
        )
    base = {
        k: v for k, v in os.environ.items() if k not in ("P2PANDA_DATABASE_URL", "DAGSTER_HOME")
    }
    modes = {"off": {**base, ARCHIVE_ENV: OFF}, "on": {**base, ARCHIVE_ENV: str(archive)}}
    figures: dict[str, list[float]] = {}
    for sample in range(args.samples):
        order = ["off", "on"] if sample % 2 == 0 else ["on", "off"]
        for mode in order:
            seconds = timed([sys.executable, "-c", SESSION], modes[mode])
            figures.setdefault(f"session_{mode}", []).append(seconds)
            print(f"sample {sample + 1}: session, archive {mode}: {seconds:.1f} s", flush=True)
        for mode in order if not args.no_demo else []:
            seconds = demo(modes[mode])
            figures.setdefault(f"demo_{mode}", []).append(seconds)
            print(f"sample {sample + 1}: panda demo, archive {mode}: {seconds:.1f} s", flush=True)
    medians = {f"{name}_seconds": round(statistics.median(v), 1) for name, v in figures.items()}
    ratios = {
        f"{what}_ratio": round(medians[f"{what}_on_seconds"] / medians[f"{what}_off_seconds"], 2)
        for what in ("session", "demo")
        if f"{what}_on_seconds" in medians
    }
    print(json.dumps({"samples": args.samples, **medians, **ratios}))


if __name__ == "__main__":
    main()
