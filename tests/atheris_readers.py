"""Coverage-guided byte fuzzing of the trace readers with atheris (on demand, not in CI).

    python tests/atheris_readers.py mooncake -atheris_runs=20000
    python tests/atheris_readers.py kv-events -atheris_runs=20000 -max_len=4096

The readers' modules are instrumented, so atheris grows inputs toward new
branches of their Python code (gzip and msgpack framing, the field checks),
which the structured hypothesis inputs of ``test_fuzz_readers.py`` reach only
by design.  Each input gets the same verdict as there: a workload whose
requests replay, or one error line that starts with the file's path (the
reported kv-events defects aside).  It starts from the real samples.
"""
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["prefixbench.workloads"]):
    from prefixbench.workloads import kvevents, mooncake, text  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads.test_fuzz_readers import FORMATS, SEEDS, check_kv_events, check_reader  # noqa: E402

NAME = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "mooncake"
DIR = tempfile.mkdtemp(prefix="prefixbench-atheris-")
PATH = os.path.join(DIR, "input" + (FORMATS[NAME][2] if NAME in FORMATS else ".kv"))
RUNS = [0]


def one_input(data: bytes) -> None:
    RUNS[0] += 1
    if NAME == "kv-events":
        check_kv_events(data, PATH)
    else:
        check_reader(NAME, data, PATH)


def main():
    corpus = os.path.join(DIR, "corpus")
    os.makedirs(corpus)
    if NAME in SEEDS:
        with open(os.path.join(corpus, "seed"), "wb") as f:
            f.write(SEEDS[NAME]()[:4096])
    atheris.Setup(sys.argv + [corpus], one_input)
    try:
        atheris.Fuzz()
    finally:
        print(f"atheris {NAME}: {RUNS[0]} inputs", file=sys.stderr)


if __name__ == "__main__":
    main()
