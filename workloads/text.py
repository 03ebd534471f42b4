"""Real text conversations as workloads: OASST trees, SWE-agent trajectories,
chitchat, and a generic chat JSONL format.

**Template.**  A message is rendered as ``<|role|>\\n{content}<|end|>\\n`` and
tokenized *per message* (header, content and end marker separately, with
the tokenizer plugin chosen by ``tokenizer=``); a conversation's tokens are
the concatenation.  So an earlier message's tokens never change when later
messages are appended, and a prompt's tokens are a strict extension of the
previous turn's wherever the conversation is.  A model call's prompt is the
rendered messages before the reply plus the generation header
``<|assistant|>\\n`` (the reply's role); its output is the reply's content and
end marker.  The header is therefore part of the prompt and of the parent's
full sequence, exactly as a serving engine sees it.

**Sessions and turns.**  Each conversation (tree, trajectory file, chat) is
one :class:`~prefixbench.workloads.model.Session`.  Its messages form a
trie (children keyed by role and content, or by message id where the data
has ids); every model call is a turn whose parent is the nearest earlier
call on its path (its *context* is that call's full sequence) and whose input
is the messages after it plus the generation header.  Where two prompts
diverge the trie forks there: the turn continues the deepest call both
share, so a prompt that is not an extension of the previous one (an edited
or elided history) is still replayed exactly, sharing only what it shares.
A call whose output message already exists at the same place is counted once.

Readers (all options: ``path=``, ``tokenizer=`` (default ``simple``; a
``*.json`` value means ``hf`` with that file), ``tokenizer_file=``,
``block_size=`` (16), ``namespace=`` (the workload name) and
``conversations=N`` (the first N conversations only)):

``oasst`` - OpenAssistant message trees (``en_100_tree.jsonl[.gz]``, one tree
    a line).  Each tree is a session.  Every assistant message is a request:
    prompt = the path from the root through its parent, output = the reply.
    Several replies to one prompter message are sibling requests with the
    same prompt; a prompter message with no reply is a request with that
    path as prompt and no output.  Turns are created breadth first, so the
    round-robin replay visits the trees depth by depth; branching happens
    at several depths and siblings share their whole parent path.  Every
    message is kept (synthetic, deleted and unreviewed ones too).  On the
    sample: 100 sessions, 913 requests (687 replies + 226 unanswered
    prompter leaves) over 1,167 messages.
``swe-agent`` - SWE-agent ``.traj`` files (``path=`` a file or a directory
    searched recursively, files in sorted path order).  Each file is a session; each assistant message
    of ``history`` is one model call whose prompt is ``history`` before it
    (assistant ``tool_calls`` are rendered as JSON after the content).  The
    stored history is the full one; the observation elision SWE-agent's
    history processors may apply when sending is not recorded, so the
    prompts replayed are the un-elided ones (the trie above would fork
    where a recorded prompt differs).  Sample: 22 sessions, 230 calls.
``chitchat`` - BYU PCC chit-chat ``dataset.json[.gz]``.  Linear human-human
    chats: the first sender is ``user``, the other ``assistant``; every turn
    (consecutive utterances of one sender, joined by newlines) is a request
    whose prompt is the conversation so far.  Sample: 7,168 sessions,
    138,737 requests.
``chat-jsonl`` - a generic export format: one JSON object per line with
    ``messages: [{"role", "content"}, ...]`` (OpenAI style; ``content`` a
    string, a list of ``{"type": "text", "text"}`` parts, or null on an
    assistant message with ``tool_calls``).  Optional ``conversation_id``
    puts lines into one session (so logs that repeat the whole history on
    every call share it); optional ``id`` names a line and ``parent_id``
    says the line's messages continue the named earlier line's messages.
    One request per distinct assistant message.  A request log whose line
    holds the prompt messages and the model's answer beside them, as
    ``response`` (a string or a message object) or ``choices[0].message``
    (an OpenAI chat-completion response), counts that answer as the line's
    last assistant message, so every call is a request even when no later
    line echoes it.

A line without ``role`` or ``content`` is a :class:`TraceFormatError` naming
file and line; a missing file is one line naming it.
"""
from __future__ import annotations

import glob
import gzip
import json
import os
import re
import zlib
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from prefixbench.blockids import DEFAULT_BLOCK_SIZE
from prefixbench.errors import ConfigError, TraceFormatError
from prefixbench.hookspecs import hookimpl
from prefixbench.workloads.model import Session, SessionWorkload, Turn
from prefixbench.workloads.tokenizers import Tokenizer, make_tokenizer

HEADER = "<|{role}|>\n"
END = "<|end|>\n"
_EMPTY = np.empty(0, dtype=np.uint32)
_SURROGATE = re.compile("[\ud800-\udfff]")
_EMPTY.flags.writeable = False


class ChatTemplate:
    """``<|role|>\\n{content}<|end|>\\n``, tokenized piecewise (cached markers)."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self._headers: dict[str, np.ndarray] = {}
        self.end = self._enc(END)
        self.end.flags.writeable = False
        self.characters = 0

    def _enc(self, text: str) -> np.ndarray:
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:      # a lone surrogate (a valid JSON escape): U+FFFD
                text = _SURROGATE.sub("\ufffd", text)
        return np.asarray(self.tokenizer.encode(text), dtype=np.uint32)

    def header(self, role: str) -> np.ndarray:
        h = self._headers.get(role)
        if h is None:
            h = self._headers[role] = self._enc(HEADER.format(role=role))
            h.flags.writeable = False
        return h

    def reply(self, content: str) -> np.ndarray:
        self.characters += len(content)
        return np.concatenate((self._enc(content), self.end))

    def message(self, role: str, content: str) -> np.ndarray:
        return np.concatenate((self.header(role), self.reply(content)))


class _Tree:
    """One session's message trie and the turns made from it."""

    __slots__ = ("children", "parent", "session", "tokens", "turn")

    def __init__(self):
        self.children: dict[tuple, int] = {}
        self.parent = [-1]            # node 0 is the empty conversation
        self.turn = [-1]              # turn whose output ends at this node
        self.tokens = [_EMPTY]
        self.session = Session()


class ConversationBuilder:
    """Turns conversations into sessions (see the module docstring)."""

    ROOT = 0

    def __init__(self, template: ChatTemplate):
        self.template = template
        self.trees: list[_Tree] = []
        self.messages = 0

    def new_session(self) -> int:
        self.trees.append(_Tree())
        return len(self.trees) - 1

    def _child(self, tree: _Tree, node: int, key: tuple) -> int:
        return tree.children.get((node,) + key, -1)

    def _add(self, tree: _Tree, node: int, key: tuple, tokens: np.ndarray, turn: int) -> int:
        n = len(tree.parent)
        tree.children[(node,) + key] = n
        tree.parent.append(node)
        tree.turn.append(turn)
        tree.tokens.append(tokens)
        self.messages += 1
        return n

    def message(self, s: int, node: int, role: str, content: str, key=None) -> int:
        """A prompt message after ``node``; returns its node."""
        tree = self.trees[s]
        k = (role, content if key is None else key)
        n = self._child(tree, node, k)
        if n < 0:
            n = self._add(tree, node, k, self.template.message(role, content), -1)
        return n

    def request(self, s: int, node: int, role: str, content: str | None, key=None) -> int:
        """A model call whose prompt ends at ``node`` and whose reply (``role``,
        ``content``; None = no output) follows; returns the reply's node."""
        tree = self.trees[s]
        k = (role, content if key is None else key)
        if content is not None:
            n = self._child(tree, node, k)
            if n >= 0 and tree.turn[n] >= 0:
                return n                        # this call is already a turn
        pending = []
        p = node
        while p > 0 and tree.turn[p] < 0:
            pending.append(tree.tokens[p])
            p = tree.parent[p]
        parent_turn = tree.turn[p] if p > 0 else None
        header = self.template.header(role)
        if pending:
            pending.reverse()
            pending.append(header)
            inp = np.concatenate(pending)
        else:
            inp = header                        # shared, read-only
        out = _EMPTY if content is None else self.template.reply(content)
        t = len(tree.session.turns)
        tree.session.turns.append(Turn(inp, out, parent=parent_turn))
        if content is None:
            return node
        if n >= 0:                              # seen before as a prompt message only
            tree.turn[n] = t
            return n
        # a reply node always ends a turn, so its tokens are never read back
        return self._add(tree, node, k, _EMPTY, t)

    def sessions(self) -> list[Session]:
        return [t.session for t in self.trees if t.session.turns]


class TextWorkload(SessionWorkload):
    """Sessions built from text, tokenized once at construction."""

    def __init__(self, sessions, *, name: str, path: str, tokenizer: Tokenizer,
                 block_size: int, namespace: str, conversations: int, messages: int,
                 characters: int):
        super().__init__(sessions, block_size=block_size, namespace=namespace, name=name)
        self.path = path
        self.tokenizer = tokenizer
        self.conversations = conversations
        self.messages = messages
        self.characters = characters

    @property
    def tokens(self) -> int:
        """Tokens of the whole workload, each counted once (turn inputs plus outputs)."""
        return sum(len(t.input_tokens) + len(t.output_tokens) for s in self.sessions for t in s.turns)

    def metadata(self) -> dict:
        md = super().metadata()
        md.update(path=self.path, tokenizer=getattr(self.tokenizer, "name", "?"),
                  conversations=self.conversations, messages=self.messages,
                  characters=self.characters, requests=len(self))
        return md


# -- file access --------------------------------------------------------------
def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError:                  # open() refuses a path with a NUL byte
        raise TraceFormatError(f"{path}: cannot read: the path has a NUL byte") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:
            raise TraceFormatError(f"{path}: truncated or corrupt gzip data ({e})") from None
    return data


def _load_json(path: str):
    data = _read_bytes(path)
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise TraceFormatError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise TraceFormatError(f"{path}:{e.lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
    except RecursionError:
        raise TraceFormatError(f"{path}: invalid JSON: nested too deeply") from None
    except ValueError:              # an integer of more than 4300 digits
        raise TraceFormatError(f"{path}: invalid JSON: a number too long to read") from None


def _json_lines(path: str) -> Iterator[tuple[str, object]]:
    """``(where, object)`` per non-blank line."""
    data = _read_bytes(path)
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            yield where, json.loads(line)
        except UnicodeDecodeError:
            raise TraceFormatError(f"{where}: not UTF-8 text") from None
        except json.JSONDecodeError as e:
            raise TraceFormatError(f"{where}: invalid JSON: {e.msg} (column {e.colno})") from None
        except RecursionError:
            raise TraceFormatError(f"{where}: invalid JSON: nested too deeply") from None
        except ValueError:          # an integer of more than 4300 digits
            raise TraceFormatError(f"{where}: invalid JSON: a number too long to read") from None


def _shown(v) -> str:
    """An id from the data as it reads in one error line (repr if it would break the line)."""
    s = str(v)
    return s if s.isprintable() and len(s) <= 200 else repr(s[:200])


def _text(obj: dict, key: str, where: str) -> str:
    if key not in obj:
        raise TraceFormatError(f"{where}: missing field '{key}'")
    v = obj[key]
    if not isinstance(v, str):
        raise TraceFormatError(f"{where}: '{key}' must be a string, got {type(v).__name__}")
    return v


# -- readers ------------------------------------------------------------------
def read_oasst(path: str, b: ConversationBuilder, limit: int | None) -> int:
    """OASST trees, one per line (see the module docstring)."""
    n = 0
    for where, tree in _json_lines(path):
        if limit is not None and n >= limit:
            break
        if not isinstance(tree, dict) or not isinstance(tree.get("prompt"), dict):
            raise TraceFormatError(f"{where}: expected a message tree with a 'prompt' object")
        s = b.new_session()
        n += 1
        queue = deque([(tree["prompt"], b.ROOT)])
        while queue:
            msg, node = queue.popleft()
            role = _text(msg, "role", where)
            if role not in ("prompter", "assistant"):
                raise TraceFormatError(f"{where}: message {_shown(msg.get('message_id'))}: role must be "
                                       f"'prompter' or 'assistant', got {role!r}")
            text = _text(msg, "text", where)
            mid = _id_field(msg, "message_id", where)
            if role == "assistant":
                here = b.request(s, node, "assistant", text, key=mid)
            else:
                here = b.message(s, node, "user", text, key=mid)
            replies = msg.get("replies") or []
            if not isinstance(replies, list):
                raise TraceFormatError(f"{where}: 'replies' must be a list")
            if role == "prompter" and not any(isinstance(r, dict) and r.get("role") == "assistant"
                                              for r in replies):
                b.request(s, here, "assistant", None)
            for r in replies:
                if not isinstance(r, dict):
                    raise TraceFormatError(f"{where}: a reply is not a JSON object")
                queue.append((r, here))
    return n


def _swe_files(path: str) -> list[str]:
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "**", "*.traj"), recursive=True))
        if not files:
            raise TraceFormatError(f"{path}: no .traj files in this directory")
        return files
    if not os.path.exists(path):
        raise TraceFormatError(f"{path}: cannot read: No such file or directory")
    return [path]


def _swe_content(m: dict, where: str) -> str:
    c = m.get("content")
    if isinstance(c, list):
        c = _parts(c, where)
    elif c is None and m.get("tool_calls"):
        c = ""
    elif not isinstance(c, str):
        if "content" not in m:
            raise TraceFormatError(f"{where}: missing field 'content'")
        raise TraceFormatError(f"{where}: 'content' must be a string, got {type(c).__name__}")
    if m.get("role") == "assistant" and m.get("tool_calls"):
        c += "\n" + json.dumps(m["tool_calls"], sort_keys=True, ensure_ascii=False)
    return c


def read_swe_agent(path: str, b: ConversationBuilder, limit: int | None) -> int:
    """SWE-agent trajectories (see the module docstring)."""
    n = 0
    for f in _swe_files(path):
        if limit is not None and n >= limit:
            break
        obj = _load_json(f)
        hist = obj.get("history") if isinstance(obj, dict) else None
        if not isinstance(hist, list):
            raise TraceFormatError(f"{f}: expected a JSON object with a 'history' list")
        s = b.new_session()
        n += 1
        node = b.ROOT
        for i, m in enumerate(hist):
            where = f"{f}: history[{i}]"
            if not isinstance(m, dict):
                raise TraceFormatError(f"{where}: expected a JSON object")
            role = _text(m, "role", where)
            content = _swe_content(m, where)
            if role == "assistant":
                node = b.request(s, node, role, content)
            else:
                node = b.message(s, node, role, content)
    return n


def read_chitchat(path: str, b: ConversationBuilder, limit: int | None) -> int:
    """BYU chit-chat conversations (see the module docstring)."""
    data = _load_json(path)
    if not isinstance(data, dict):
        raise TraceFormatError(f"{path}: expected a JSON object mapping ids to conversations")
    n = 0
    for cid, conv in data.items():
        if limit is not None and n >= limit:
            break
        where = f"{path}: conversation {_shown(cid)}"
        msgs = conv.get("messages") if isinstance(conv, dict) else None
        if not isinstance(msgs, list):
            raise TraceFormatError(f"{where}: missing 'messages' list")
        s = b.new_session()
        n += 1
        roles: dict[str, str] = {}
        node = b.ROOT
        for k, turn in enumerate(msgs):
            if not isinstance(turn, list) or not turn or not all(isinstance(u, dict) for u in turn):
                raise TraceFormatError(f"{where}: turn {k} must be a non-empty list of utterances")
            text = "\n".join(_text(u, "text", f"{where} turn {k}") for u in turn)
            sender = str(turn[0].get("sender"))
            role = roles.setdefault(sender, "user" if not roles else "assistant")
            node = b.request(s, node, role, text)
    return n


def _parts(parts: list, where: str) -> str:
    out = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, dict) and isinstance(p.get("text"), str):
            out.append(p["text"])
        elif isinstance(p, dict) and isinstance(p.get("type"), str):
            out.append(f"<|{p['type']}|>")
        else:
            raise TraceFormatError(f"{where}: a content part must be a string or an object "
                                   "with 'text' or 'type'")
    return "".join(out)


def _chat_message(m, where: str) -> tuple[str, str]:
    if not isinstance(m, dict):
        raise TraceFormatError(f"{where}: expected an object with 'role' and 'content'")
    if "role" not in m:
        raise TraceFormatError(f"{where}: missing field 'role'")
    role = m["role"]
    if not isinstance(role, str) or not role:
        raise TraceFormatError(f"{where}: 'role' must be a non-empty string, got {role!r}")
    if "content" not in m:
        raise TraceFormatError(f"{where}: missing field 'content'")
    c = m["content"]
    if isinstance(c, list):
        c = _parts(c, where)
    elif c is None and m.get("tool_calls"):
        c = ""
    elif not isinstance(c, str):
        raise TraceFormatError(f"{where}: 'content' must be a string or a list of parts, "
                               f"got {type(c).__name__}")
    if m.get("tool_calls"):
        c += "\n" + json.dumps(m["tool_calls"], sort_keys=True, ensure_ascii=False)
    return role, c


def _id_field(obj: dict, key: str, where: str):
    v = obj.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (str, int))):
        raise TraceFormatError(f"{where}: '{key}' must be a string or an integer, got {v!r}")
    return v


def _answer(obj: dict, where: str):
    """A request log's answer (``response`` or ``choices[0].message``) as a message."""
    if obj.get("response") is not None:
        r = obj["response"]
        if isinstance(r, str):
            return "assistant", r
        if isinstance(r, dict):
            return _chat_message(dict(r, role=r.get("role") or "assistant"), f"{where}: response")
        raise TraceFormatError(f"{where}: 'response' must be a string or a message object, "
                               f"got {type(r).__name__}")
    ch = obj.get("choices")
    if ch is None:
        return None
    if not isinstance(ch, list) or not ch or not isinstance(ch[0], dict) \
            or not isinstance(ch[0].get("message"), dict):
        raise TraceFormatError(f"{where}: 'choices' must be a list whose first entry has a "
                               "'message' object")
    m = ch[0]["message"]
    return _chat_message(dict(m, role=m.get("role") or "assistant"), f"{where}: choices[0].message")


def read_chat_jsonl(path: str, b: ConversationBuilder, limit: int | None) -> int:
    """Generic chat JSONL (see the module docstring)."""
    by_conv: dict = {}
    by_id: dict = {}
    for where, obj in _json_lines(path):
        if not isinstance(obj, dict):
            raise TraceFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if "messages" not in obj:
            raise TraceFormatError(f"{where}: missing field 'messages'")
        msgs = obj["messages"]
        if not isinstance(msgs, list):
            raise TraceFormatError(f"{where}: 'messages' must be a list of messages")
        parsed = [_chat_message(m, f"{where}: messages[{i}]") for i, m in enumerate(msgs)]
        answer = _answer(obj, where)
        if answer is not None:
            parsed.append(answer)
        conv = _id_field(obj, "conversation_id", where)
        rid = _id_field(obj, "id", where)
        parent = _id_field(obj, "parent_id", where)
        if parent is not None:
            if parent not in by_id:
                raise TraceFormatError(f"{where}: parent_id {parent!r} names no earlier line's id")
            at = by_id[parent]
        elif conv is not None and conv in by_conv:
            at = (by_conv[conv], b.ROOT)
        elif limit is not None and len(b.trees) >= limit:
            at = None                           # beyond conversations=N: skipped
        else:
            at = (b.new_session(), b.ROOT)
            if conv is not None:
                by_conv[conv] = at[0]
        if at is None:
            if rid is not None:
                by_id[rid] = None
            continue
        s, node = at
        for role, content in parsed:
            node = (b.request if role == "assistant" else b.message)(s, node, role, content)
        if rid is not None:
            by_id[rid] = (s, node)
    return len(b.sessions())


# -- plugin registration ------------------------------------------------------
_OPTIONS = ("path", "tokenizer", "tokenizer_file", "block_size", "namespace", "conversations")

#: workload -> (reader, default data under ../shared/data, what path= names)
READERS = {
    "oasst": (read_oasst, "oasst1-en100-trees/en_100_tree.jsonl.gz", "an OASST trees .jsonl[.gz]"),
    "swe-agent": (read_swe_agent, "swe-agent-trajectories", "a .traj file or a directory of them"),
    "chitchat": (read_chitchat, "chitchat/dataset.json.gz", "a chit-chat dataset.json[.gz]"),
    "chat-jsonl": (read_chat_jsonl, None, "a chat .jsonl[.gz] file"),
}


def find_data(rel: str) -> Path:
    """``../shared/data/<rel>`` next to the checkout or the working directory."""
    roots = [Path(__file__).resolve().parents[1], Path.cwd()]
    looked = []
    for root in roots:
        cand = root.parent / "shared" / "data" / rel
        if cand.exists():
            return cand
        looked.append(str(cand))
    raise ConfigError(f"option path: {rel} not found (looked at "
                      f"{' and '.join(dict.fromkeys(looked))}); pass path=...")


def _int_option(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, (bool, float)):
        raise ConfigError(f"option {name}: {value!r} is not a valid int")
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"option {name}: {value!r} is not a valid int") from None
    if not lo <= v <= hi:
        raise ConfigError(f"option {name}: must be in [{lo}, {hi}], got {v}")
    return v


def make_text_workload(name: str, **options) -> TextWorkload:
    """Build a text workload from (possibly string) options."""
    reader, default, what = READERS[name]
    for key in options:
        if key not in _OPTIONS:
            raise ConfigError(f"option {key}: not an option of workload {name} "
                              f"(options: {', '.join(_OPTIONS)})")
    path = options.get("path")
    if path is None or path == "":
        if default is None:
            raise ConfigError(f"option path: workload {name} needs path= ({what})")
        path = find_data(default)
    elif not isinstance(path, (str, Path)):
        raise ConfigError(f"option path: must be a file path, got {path!r}")
    path = str(path)
    tok_name = str(options.get("tokenizer") or "simple")
    tok_file = options.get("tokenizer_file")
    if tok_name.endswith(".json"):
        tok_name, tok_file = "hf", tok_name
    if tok_name == "hf" and not tok_file:
        raise ConfigError("option tokenizer_file: tokenizer=hf needs tokenizer_file=PATH "
                          "(a local tokenizer.json)")
    tok_opts = {"path": str(tok_file)} if tok_file else {}
    if tok_file and tok_name != "hf":
        raise ConfigError(f"option tokenizer_file: only for tokenizer=hf, not {tok_name!r}")
    tokenizer = make_tokenizer(tok_name, **tok_opts)
    block_size = _int_option("block_size", options.get("block_size", DEFAULT_BLOCK_SIZE), 1, 1 << 20)
    limit = options.get("conversations")
    if limit is not None and limit != "":
        limit = _int_option("conversations", limit, 1, 10**9)
    else:
        limit = None
    namespace = options.get("namespace")
    if namespace is not None and (not isinstance(namespace, (str, int)) or namespace == ""):
        raise ConfigError(f"option namespace: must be a non-empty string, got {namespace!r}")
    template = ChatTemplate(tokenizer)
    builder = ConversationBuilder(template)
    n = reader(path, builder, limit)
    if not builder.sessions():
        raise TraceFormatError(f"{path}: no model calls found (workload {name} needs at least "
                               "one assistant message)")
    return TextWorkload(builder.sessions(), name=name, path=path, tokenizer=tokenizer,
                        block_size=block_size, namespace=name if namespace is None else str(namespace),
                        conversations=n, messages=builder.messages,
                        characters=template.characters)


def oasst(**options) -> TextWorkload:
    """OpenAssistant message trees (text; every root-to-prompter path a request)."""
    return make_text_workload("oasst", **options)


def swe_agent(**options) -> TextWorkload:
    """SWE-agent trajectories (text; each model call's prompt is the history sent)."""
    return make_text_workload("swe-agent", **options)


def chitchat(**options) -> TextWorkload:
    """BYU chit-chat human-human conversations (text; linear)."""
    return make_text_workload("chitchat", **options)


def chat_jsonl(**options) -> TextWorkload:
    """Generic chat JSONL, OpenAI-style message lists (path= required)."""
    return make_text_workload("chat-jsonl", **options)


@hookimpl
def prefixbench_register_workloads(register):
    register("oasst", oasst)
    register("swe-agent", swe_agent)
    register("chitchat", chitchat)
    register("chat-jsonl", chat_jsonl)
