"""Shared check for the command-line tests: a bad input is one clear error line."""


def one_line_error(code, err, *needles):
    assert code != 0
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("prefixbench: error:") and "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])
