"""Fuzzing the option parsers: sizes, strategy options, workload options, KEY=VALUE.

Every input either parses to a value in range or is refused with one
:class:`~prefixbench.errors.ConfigError` line naming the option; nothing else
escapes (no traceback), and no input runs past the time box.  The default run
is short and seeded; ``PREFIXBENCH_FUZZ=1`` runs 10**4 inputs per target.
"""
import math
import re

import pytest
from hypothesis import given, strategies as st

from prefixbench.errors import ConfigError, TraceFormatError, UnknownPluginError
from prefixbench.units import MAX_SIZE, parse_size

from fuzz_support import counted, fuzz_settings, one_line, time_box

_UNITS = ["", "b", "B", "k", "K", "kb", "KiB", "ki", "m", "MB", "MiB", "Mi", "g", "G", "GiB",
          "t", "TB", "TiB", "ib", "x", "e3", "EiB", "PB"]
_NUM = st.one_of(st.integers(0, 10 ** 30).map(str),
                 st.from_regex(r"[0-9]{1,40}(\.[0-9]{0,40})?", fullmatch=True),
                 st.floats(allow_nan=True, allow_infinity=True).map(repr),
                 st.sampled_from(["nan", "inf", "-1", "1e400", "0x10", "1_000", "٣", "１", ".5",
                                  "5.", " ", ""]))
_SIZE_TEXT = st.one_of(
    st.builds(lambda n, sp, u, tail: f"{n}{sp}{u}{tail}", _NUM, st.sampled_from(["", " ", "\t"]),
              st.sampled_from(_UNITS), st.sampled_from(["", " ", "\n", "x", "\x00"])),
    st.text(max_size=80),
    st.integers(-10, 10 ** 25),
    st.floats())


@fuzz_settings()
@given(_SIZE_TEXT)
def test_parse_size_never_escapes(text):
    counted("parse_size")
    with time_box():
        try:
            n = parse_size("--cache-bytes", text)
        except ConfigError as e:
            assert one_line(e).startswith("option --cache-bytes: ")
            return
    assert type(n) is int and 0 <= n <= MAX_SIZE
    m = re.fullmatch(r"\s*([0-9]+)(?:\.[0-9]*)?\s*([a-zA-Z]*)\s*", str(text))
    assert m, text           # only plain ASCII numbers with a unit are accepted
    if m.group(2).lower() in ("", "b"):
        assert n == int(m.group(1))


def test_parse_size_exact_and_bounded():
    assert parse_size("--x", "99999999999999999") == 99999999999999999
    assert parse_size("--x", "1.5KiB") == 1536
    assert parse_size("--x", " 64 MiB\n") == 64 << 20
    assert parse_size("--x", "8TiB") == 8 << 40
    for bad in ("9" * 400, "9" * 20, "٣MiB", "1e3", "-1", "nan", "x" * 1000):
        with pytest.raises(ConfigError, match=r"^option --x: ") as e:
            parse_size("--x", bad)
        assert len(one_line(e.value)) < 200


# ---------------------------------------------------------------- strategy options
def _strategy_specs():
    from prefixbench.registry import get_registry
    reg = get_registry()
    return {n: reg.get("strategy", n).factory.options for n in reg.names("strategy")}


SPECS = _strategy_specs()
_VALUE = st.one_of(st.text(max_size=30), st.integers(-2 ** 70, 2 ** 70).map(str),
                   st.floats(allow_nan=True).map(repr),
                   st.sampled_from(["true", "off", "yes", "0", "1", "nan", "inf", "-inf", "1e3",
                                    "compiled", "python", "background", "sync", "paper", "auto",
                                    "", " 3 ", "1" * 5000]))


@fuzz_settings()
@given(st.sampled_from(sorted(SPECS)), st.data())
def test_strategy_options_never_escape(strategy, data):
    counted("strategy options")
    from prefixbench.plugins.strategy import parse_options
    spec = SPECS[strategy]
    keys = sorted(spec) + ["no_such_option"]
    given_opts = data.draw(st.dictionaries(st.sampled_from(keys), _VALUE, max_size=4))
    with time_box():
        try:
            out = parse_options(f"strategy {strategy}", spec, given_opts)
        except ConfigError as e:
            msg = one_line(e)
            assert any(msg.startswith(f"option {k}: ") for k in given_opts), msg
            return
    for k, opt in spec.items():
        v = out[k]
        assert type(v) is type(opt.default), (k, v)
        if isinstance(v, float):
            assert math.isfinite(v), (k, v)
        if opt.min is not None:
            assert v >= opt.min
        if opt.max is not None:
            assert v <= opt.max
        if opt.choices is not None:
            assert v in opt.choices


def test_float_option_refuses_nan_and_infinity():
    from prefixbench.plugins.strategy import Option
    for bad in ("nan", "inf", "-inf"):
        with pytest.raises(ConfigError, match=f"option max_load: '{bad}' is not a finite number"):
            Option(0.75, min=0.05, max=0.95).parse("max_load", bad)


# ---------------------------------------------------------------- workload options
_WORKLOAD_KEYS = {
    "codeact": ["preset", "sessions", "scale", "seed", "length_scale", "group_sessions",
                "system_head_tokens", "namespace", "block_size", "bogus"],
    "mooncake": ["path", "block_size", "namespace", "bogus"],
    "chat-jsonl": ["path", "tokenizer", "tokenizer_file", "block_size", "namespace",
                   "conversations", "bogus"],
}


@pytest.mark.parametrize("name", ["mooncake", "chat-jsonl", "oasst", "swe-agent", "chitchat"])
def test_a_path_with_a_nul_byte_is_one_line(name):
    """open() raises ValueError (not OSError) for it: found by the long run."""
    from prefixbench.harness.bench import make_workload
    with pytest.raises(TraceFormatError) as e:
        make_workload(name, {"path": "trace\x00.jsonl"})
    assert one_line(e.value).startswith("trace\\x00.jsonl: cannot read")   # shown escaped


@pytest.fixture(scope="module")
def chat_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("opts") / "chat.jsonl"
    p.write_text('{"messages": [{"role": "user", "content": "hi there"}, '
                 '{"role": "assistant", "content": "hello"}]}\n')
    return str(p)


@pytest.fixture(scope="module")
def hash_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("opts") / "trace.jsonl"
    p.write_text('{"hash_ids": [1, 2, 3]}\n{"hash_ids": [1, 2, 4]}\n')
    return str(p)


@fuzz_settings()
@given(name=st.sampled_from(sorted(_WORKLOAD_KEYS)), data=st.data())
def test_workload_options_never_escape(chat_file, hash_file, monkeypatch, name, data):
    counted("workload options")
    """Options as ``-W KEY=VALUE`` gives them (strings), the file paths kept valid
    half of the time so the other options are reached."""
    from prefixbench.harness.bench import make_workload
    from prefixbench.workloads import synthetic
    # the plans of a valid synthetic workload are not what is fuzzed here (sessions=10**9)
    monkeypatch.setattr(synthetic.SyntheticWorkload, "_build_plans", lambda self: None)
    opts = data.draw(st.dictionaries(st.sampled_from(_WORKLOAD_KEYS[name]), _VALUE, max_size=4))
    if name != "codeact" and data.draw(st.booleans()):
        opts["path"] = chat_file if name == "chat-jsonl" else hash_file
    with time_box():
        try:
            make_workload(name, opts)
        except ConfigError as e:
            msg = one_line(e)
            assert msg.startswith("option "), msg
        except TraceFormatError as e:   # a bad path= is a trace error naming that path,
            # its control characters escaped as every error line shows them
            shown = str(TraceFormatError(str(opts.get("path"))))
            assert one_line(e).startswith(shown), str(e)
        except UnknownPluginError as e:  # tokenizer=NAME that no plugin provides
            assert one_line(e).startswith("unknown tokenizer "), str(e)


@fuzz_settings()
@given(st.lists(st.text(max_size=20), max_size=5))
def test_parse_kv_never_escapes(items):
    counted("KEY=VALUE")
    from prefixbench.harness.build import parse_kv
    try:
        out = parse_kv("--workload-option", items)
    except ConfigError as e:
        assert one_line(e).startswith("option --workload-option: ")
        return
    assert all("=" in it for it in items) and len(out) <= len(items)


@fuzz_settings()
@given(st.one_of(st.text(max_size=30), _NUM,
                 st.builds(lambda n, u: f"{n}{u}", _NUM, st.sampled_from(["", "k", "M", "g", "x"]))))
def test_parse_count_never_escapes(text):
    counted("parse_count")
    from prefixbench.harness.recovery import parse_count
    try:
        n = parse_count("--entries", text)
    except ConfigError as e:
        assert one_line(e).startswith("option --entries: ")
        return
    assert type(n) is int and n >= 1
