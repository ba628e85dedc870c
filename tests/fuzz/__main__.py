"""Run the fuzz targets of :mod:`tests.fuzz.targets` under atheris (coverage-guided).

    python -m tests.fuzz                       # every target, 60 s each
    python -m tests.fuzz --seconds 600 shape   # one target, longer
    FUZZ_SECONDS=300 make fuzz

atheris is the optional ``fuzz`` extra (``pip install -e '.[fuzz]'``). Each target runs in its
own process (libFuzzer exits when done), keeps its corpus in ``.fuzz/<target>/`` so the next
run starts from what earlier runs found, and writes any crashing input to
``.fuzz/crash-<target>-*``; the exit status is non-zero if any target crashed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

_WORK = Path(".fuzz")
_NAMES = ("frames", "headers", "shape")


def _run_one(name: str, libfuzzer_args: list[str]) -> None:
    import atheris

    with atheris.instrument_imports(include=["protocol"]):
        from tests.fuzz.targets import TARGETS
    atheris.Setup([sys.argv[0], *libfuzzer_args], TARGETS[name])
    atheris.Fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help=f"some of {', '.join(_NAMES)} (default all)")
    parser.add_argument("--seconds", type=int, default=60, help="per target")
    parser.add_argument("--one", choices=_NAMES, help=argparse.SUPPRESS)
    args, libfuzzer_args = parser.parse_known_args()
    if args.one:
        _run_one(args.one, libfuzzer_args)
        return 0
    unknown = set(args.targets) - set(_NAMES)
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}; choose from {_NAMES}")
    failed = []
    for name in args.targets or _NAMES:
        corpus = _WORK / name
        corpus.mkdir(parents=True, exist_ok=True)
        print(f"==> fuzzing {name} for {args.seconds} s (corpus {corpus})", flush=True)
        status = subprocess.call(
            [
                sys.executable,
                "-m",
                "tests.fuzz",
                "--one",
                name,
                f"-max_total_time={args.seconds}",
                f"-artifact_prefix={_WORK}/crash-{name}-",
                "-print_final_stats=1",
                str(corpus),
            ]
        )
        if status:
            failed.append(name)
    print("crashed: " + ", ".join(failed) if failed else "no crashes", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
