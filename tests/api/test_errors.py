"""Every user-facing error is one line, whatever the input put into it."""
import pytest

from prefixbench.errors import ConfigError, StoreError, TraceFormatError


@pytest.mark.parametrize("cls", [ConfigError, StoreError, TraceFormatError])
def test_control_characters_from_input_are_shown_escaped(cls):
    e = cls("trace /tmp/a\rb\nc\x1b.jsonl line 3: bad")
    assert str(e) == "trace /tmp/a\\rb\\nc\\x1b.jsonl line 3: bad"
    assert "\n" not in str(e) and "\r" not in str(e)


def test_a_reader_error_naming_a_path_with_a_newline_is_one_line(tmp_path):
    from prefixbench.registry import get_registry
    bad = tmp_path / "two\nlines.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(TraceFormatError) as e:
        list(get_registry().get("workload", "mooncake").factory(path=str(bad)).requests())
    assert "\n" not in str(e.value) and "two\\nlines.jsonl" in str(e.value)
