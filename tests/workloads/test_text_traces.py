"""Text traces: the tokenizer plugins, the chat template and the four readers."""
import gzip
import json
import os
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest

from prefixbench.errors import (
    ConfigError,
    MissingDependencyError,
    TraceFormatError,
    UnknownPluginError,
)
from prefixbench.registry import get_registry
from prefixbench.workloads import text as tx
from prefixbench.workloads import tokenizers as tk

from conftest import REPO
DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
OASST = os.path.join(DATA, "oasst1-en100-trees", "en_100_tree.jsonl.gz")
SWE = os.path.join(DATA, "swe-agent-trajectories")
CHITCHAT = os.path.join(DATA, "chitchat", "dataset.json.gz")


def needs(path):
    return pytest.mark.skipif(not os.path.exists(path), reason=f"{path} not present")


SAMPLE = ("The quick brown fox jumps over the lazy dog, internationalization "
          "and 12345 numbers!  <|user|>\n  def f(x):\n      return x_1 ** 2\n")


# -- tokenizers ---------------------------------------------------------------
def test_tokenizers_are_registered():
    names = get_registry().names("tokenizer")
    assert {"simple", "hf"} <= set(names)
    assert isinstance(tk.make_tokenizer("simple"), tk.Tokenizer)
    with pytest.raises(UnknownPluginError, match="available: .*simple"):
        tk.make_tokenizer("nope")


def test_simple_tokenizer_deterministic_across_processes():
    here = tk.SimpleTokenizer().encode(SAMPLE)
    code = ("import sys; from prefixbench.workloads.tokenizers import SimpleTokenizer;"
            "print(SimpleTokenizer().encode(sys.argv[1]).tolist())")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code, SAMPLE], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert json.loads(out) == here.tolist()
    assert here.dtype == np.uint32 and here.max() < tk.DEFAULT_VOCAB_SIZE
    # a cached second call and a fresh instance agree
    assert np.array_equal(tk.SimpleTokenizer().encode(SAMPLE), tk.SimpleTokenizer().encode(SAMPLE))


def test_simple_tokenizer_shape():
    tok = tk.simple(vocab_size="1000")
    assert tok.vocab_size == 1000 and tok.encode(SAMPLE).max() < 1000
    assert len(tok.encode("")) == 0
    assert len(tok.encode(" <|assistant|>")) == 1          # a marker is one token
    assert len(tok.encode("the")) == 1 and len(tok.encode("internationalization")) > 3
    # equal text -> equal ids; a word keeps its id wherever it appears
    a, b = tok.encode(" hello world"), tok.encode(" hello there")
    assert a[0] == b[0] and a[1] != b[1]
    with pytest.raises(ConfigError, match="option vocab_size"):
        tk.simple(vocab_size="x")
    with pytest.raises(ConfigError, match="option bogus"):
        tk.simple(bogus=1)


@needs(OASST)
def test_tokens_per_char_on_oasst_english():
    tok = tk.SimpleTokenizer()
    texts = []

    def walk(m):
        texts.append(m["text"])
        for r in m["replies"]:
            walk(r)
    with gzip.open(OASST, "rt") as f:
        for line in f:
            walk(json.loads(line)["prompt"])
    chars = sum(map(len, texts))
    tokens = sum(len(tok.encode(t)) for t in texts)
    assert len(texts) == 1167
    assert 0.2 <= tokens / chars <= 0.32     # a BPE tokenizer: ~1 token per 4 characters


def test_hf_tokenizer_errors(tmp_path):
    with pytest.raises(ConfigError, match="option path: .*tokenizer_file"):
        tk.hf()
    with pytest.raises(ConfigError, match="no such file"):
        tk.hf(path=str(tmp_path / "missing.json"))
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "BPE", ')
    with pytest.raises(ConfigError) as e:
        tk.hf(path=str(bad))
    assert str(bad) in str(e.value) and "\n" not in str(e.value)
    bad.write_text('["not", "a", "tokenizer"]')
    with pytest.raises(ConfigError, match="not a valid tokenizer.json"):
        tk.hf(path=str(bad))


def test_hf_tokenizer_missing_package_or_bad_model(tmp_path, monkeypatch):
    f = tmp_path / "tokenizer.json"
    f.write_text('{"version": "1.0", "model": {"type": "NoSuchModel"}}')
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        with pytest.raises(MissingDependencyError, match="pip install tokenizers"):
            tk.hf(path=str(f))
    else:
        with pytest.raises(ConfigError, match=str(f)):
            tk.hf(path=str(f))
    monkeypatch.setitem(sys.modules, "tokenizers", None)     # force the missing-package path
    with pytest.raises(MissingDependencyError, match="pip install tokenizers"):
        tk.hf(path=str(f))


def test_hf_tokenizer_loads_a_local_file(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    t = tokenizers.Tokenizer(tokenizers.models.WordLevel(
        {"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    t.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    f = str(tmp_path / "tokenizer.json")
    t.save(f)
    tok = tk.make_tokenizer("hf", path=f)
    assert tok.vocab_size == 3 and tok.encode("hello world foo").tolist() == [0, 1, 2]
    wl = tx.make_text_workload("chat-jsonl", tokenizer=f, path=_write(
        tmp_path, [{"messages": _msgs(("user", "hello " * 40), ("assistant", "world " * 40))}]))
    assert wl.metadata()["tokenizer"] == "hf" and len(wl) == 1


# -- invariants over the readers ----------------------------------------------
def _by_turn(wl):
    return {(r.session, r.turn): r for r in wl.requests()}


def _check_extensions(wl):
    """Every turn's match_ids start with its parent's insert_ids (and the
    parent's whole sequence is within the prompt)."""
    reqs = _by_turn(wl)
    bs = wl.block_size
    for (s, t), r in reqs.items():
        p = wl.sessions[s].turns[t].parent
        ctx = 0
        if p is not None:
            pr = reqs[(s, p)]
            assert np.array_equal(r.match_ids[:len(pr.insert_ids)], pr.insert_ids)
            ctx = len(pr.insert_ids) * bs
        assert len(r.match_ids) == r.prompt_tokens // bs
        assert len(r.insert_ids) >= len(r.match_ids)
        assert r.prompt_tokens >= ctx
    return reqs


@needs(OASST)
def test_oasst_counts_and_branching():
    wl = tx.make_text_workload("oasst")
    assert wl.conversations == 100 and len(wl.sessions) == 100
    assert wl.messages == 1167
    assert len(wl) == 913                     # 687 replies + 226 unanswered prompter leaves
    reqs = _check_extensions(wl)
    # siblings: several replies to one prompter share the whole prompt; a fork
    # deeper than the root shares the parent path's blocks
    siblings = defaultdict(list)
    for s, sess in enumerate(wl.sessions):
        for t, turn in enumerate(sess.turns):
            siblings[(s, turn.parent, turn.input_tokens.tobytes())].append(t)
    same_prompt = [(k, v) for k, v in siblings.items() if len(v) > 1]
    assert len(same_prompt) > 50
    for (s, _, _), ts in same_prompt:
        a, b = reqs[(s, ts[0])], reqs[(s, ts[1])]
        assert np.array_equal(a.match_ids, b.match_ids)
        assert not np.array_equal(a.insert_ids, b.insert_ids) or len(a.insert_ids) == len(a.match_ids)
    depths = set()
    for s, sess in enumerate(wl.sessions):
        kids = defaultdict(int)
        for turn in sess.turns:
            kids[turn.parent] += 1
        for p, n in kids.items():
            if n > 1 and p is not None:
                d, q = 1, p
                while sess.turns[q].parent is not None:
                    d, q = d + 1, sess.turns[q].parent
                depths.add(d)
    assert len(depths) >= 2                   # branching at several depths


@needs(SWE)
def test_swe_agent_counts():
    wl = tx.make_text_workload("swe-agent")
    assert len(wl.sessions) == 22 and wl.conversations == 22
    assert len(wl) == 230 and wl.messages == 489
    _check_extensions(wl)
    # linear: every call continues the previous one
    for sess in wl.sessions:
        assert sess.turns[0].parent is None
        assert [t.parent for t in sess.turns[1:]] == list(range(len(sess.turns) - 1))
    one = tx.make_text_workload("swe-agent", conversations="3")
    assert len(one.sessions) == 3


@needs(CHITCHAT)
def test_chitchat_limited_counts_and_linearity():
    n = 300
    wl = tx.make_text_workload("chitchat", conversations=n)
    with gzip.open(CHITCHAT, "rb") as f:
        raw = json.load(f)
    first = list(raw.values())[:n]
    assert wl.conversations == n and len(wl.sessions) == n
    assert len(wl) == sum(len(c["messages"]) for c in first)
    _check_extensions(wl)
    for sess in wl.sessions:
        assert [t.parent for t in sess.turns] == [None] + list(range(len(sess.turns) - 1))


@needs(CHITCHAT)
def test_chitchat_full_counts_with_a_trivial_tokenizer():
    class Empty:
        name, vocab_size = "empty", 1

        def encode(self, text):
            return np.empty(0, dtype=np.uint32)
    b = tx.ConversationBuilder(tx.ChatTemplate(Empty()))
    assert tx.read_chitchat(CHITCHAT, b, None) == 7168
    assert sum(len(s.turns) for s in b.sessions()) == 138737


def test_template_is_per_message_and_stable():
    tok = tk.SimpleTokenizer()
    tpl = tx.ChatTemplate(tok)
    m = tpl.message("user", "hi there")
    assert np.array_equal(m, np.concatenate((tok.encode("<|user|>\n"), tok.encode("hi there"),
                                             tok.encode("<|end|>\n"))))


# -- chat-jsonl ---------------------------------------------------------------
def _write(tmp_path, lines, name="chat.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return str(p)


def _msgs(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


def test_chat_jsonl_requests_and_sharing(tmp_path):
    long = "You are a careful assistant. " * 20
    path = _write(tmp_path, [
        {"conversation_id": "a", "messages": _msgs(("system", long), ("user", "hello"),
                                                    ("assistant", "hi! " * 30))},
        # a log line repeating the history: only the new assistant message is new
        {"conversation_id": "a", "id": "a2",
         "messages": _msgs(("system", long), ("user", "hello"), ("assistant", "hi! " * 30),
                           ("user", "tell me more"), ("assistant", "more " * 40))},
        # a fork continuing line a2 through parent_id
        {"parent_id": "a2", "messages": _msgs(("user", "and again"), ("assistant", "again"))},
        # an unrelated conversation with the same system prompt: new session
        {"messages": _msgs(("system", long), ("user", "other"),
                           ("assistant", [{"type": "text", "text": "parts"}]))},
        # trailing user message: no request
        {"messages": _msgs(("user", "unanswered"))},
    ])
    wl = tx.make_text_workload("chat-jsonl", path=path)
    assert len(wl.sessions) == 2              # the unanswered line makes no request
    assert [len(s.turns) for s in wl.sessions] == [3, 1]
    assert [t.parent for t in wl.sessions[0].turns] == [None, 0, 1]
    reqs = _check_extensions(wl)
    a0, b0 = reqs[(0, 0)], reqs[(1, 0)]
    shared = 0
    while shared < min(len(a0.match_ids), len(b0.match_ids)) and \
            a0.match_ids[shared] == b0.match_ids[shared]:
        shared += 1
    assert shared >= 5                        # the shared system prompt's blocks
    assert len(tx.make_text_workload("chat-jsonl", path=path, conversations=1).sessions) == 1


@pytest.mark.parametrize("line, needle", [
    ('{"messages": [{"content": "x"}]}', "missing field 'role'"),
    ('{"messages": [{"role": "user"}]}', "missing field 'content'"),
    ('{"messages": [{"role": "user", "content": 3}]}', "'content' must be"),
    ('{"messages": [{"role": "", "content": "x"}]}', "'role' must be"),
    ('{"messages": "nope"}', "'messages' must be a list"),
    ('{"nothing": 1}', "missing field 'messages'"),
    ('{"messages": [', "invalid JSON"),
    ('[1, 2]', "expected a JSON object"),
    ('{"parent_id": "zz", "messages": []}', "parent_id 'zz'"),
])
def test_chat_jsonl_bad_lines_name_file_and_line(tmp_path, line, needle):
    good = json.dumps({"messages": _msgs(("user", "a"), ("assistant", "b"))})
    path = _write(tmp_path, [good, "", line])
    with pytest.raises(TraceFormatError) as e:
        tx.make_text_workload("chat-jsonl", path=path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:3: ") and needle in msg and "\n" not in msg


def test_missing_files_and_options(tmp_path):
    with pytest.raises(TraceFormatError, match="cannot read"):
        tx.make_text_workload("chat-jsonl", path=str(tmp_path / "none.jsonl"))
    with pytest.raises(TraceFormatError, match="cannot read"):
        tx.make_text_workload("swe-agent", path=str(tmp_path / "none.traj"))
    with pytest.raises(TraceFormatError, match="no .traj files"):
        tx.make_text_workload("swe-agent", path=str(tmp_path))
    with pytest.raises(ConfigError, match="needs path="):
        tx.make_text_workload("chat-jsonl")
    with pytest.raises(ConfigError, match="option bogus"):
        tx.make_text_workload("oasst", bogus=1)
    empty = _write(tmp_path, [{"messages": _msgs(("user", "nobody answers"))}], "e.jsonl")
    with pytest.raises(TraceFormatError, match="no model calls"):
        tx.make_text_workload("chat-jsonl", path=empty)
    with pytest.raises(ConfigError, match="option conversations"):
        tx.make_text_workload("oasst", conversations=0)
    with pytest.raises(ConfigError, match="option block_size"):
        tx.make_text_workload("oasst", block_size="x")
    with pytest.raises(UnknownPluginError, match="tokenizer"):
        tx.make_text_workload("oasst", tokenizer="nope")
    with pytest.raises(ConfigError, match="no such file"):
        tx.make_text_workload("oasst", tokenizer=str(tmp_path / "tok.json"))
    with pytest.raises(ConfigError, match="option tokenizer_file"):
        tx.make_text_workload("oasst", tokenizer="hf")
    with pytest.raises(ConfigError, match="only for tokenizer=hf"):
        tx.make_text_workload("oasst", tokenizer_file=str(tmp_path / "tok.json"))


def test_bad_oasst_and_traj_files(tmp_path):
    p = _write(tmp_path, ['{"prompt": {"role": "prompter", "replies": []}}'], "t.jsonl")
    with pytest.raises(TraceFormatError, match=f"^{p}:1: missing field 'text'"):
        tx.make_text_workload("oasst", path=p)
    t = tmp_path / "x.traj"
    t.write_text('{"history": [{"role": "system", "content": "s"}, {"content": "u"}]}')
    with pytest.raises(TraceFormatError, match=r"history\[1\]: missing field 'role'"):
        tx.make_text_workload("swe-agent", path=str(t))
    t.write_text('{"history": [\n{"role": ')
    with pytest.raises(TraceFormatError, match=f"^{t}:2: invalid JSON"):
        tx.make_text_workload("swe-agent", path=str(t))


def test_registered_and_cli_describe(run_cli, tmp_path):
    assert {"oasst", "swe-agent", "chitchat", "chat-jsonl"} <= set(get_registry().names("workload"))
    path = _write(tmp_path, [{"messages": _msgs(("user", "x " * 100), ("assistant", "y " * 50))}])
    code, out, _err = run_cli("workload", "describe", "chat-jsonl", "-W", f"path={path}")
    assert code == 0 and "requests" in out
