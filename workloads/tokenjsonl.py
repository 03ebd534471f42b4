"""Token-id request logs: the ``token-jsonl`` workload.

One JSON object per line::

    {"session_id"?: str|int, "prompt_token_ids": [...], "output_token_ids"?: [...],
     "timestamp"?: seconds}

Each line is one request: ``match(prompt)`` then ``insert(prompt + output)``,
in file order (a log's order is when its requests arrived; a file whose lines
all carry timestamps is replayed in timestamp order, ties in file order).
Serving logs record the whole prompt of every call, so a request's ids are
simply the chained ids of its tokens; ``session_id`` only saves work: when a
prompt starts with the previous request of its session (prompt and output),
only the new tokens are hashed, from that request's last full block.

Options: ``path=`` (required), ``block_size=`` (default 16), ``namespace=``
(pbh64's seed), ``block_hash=`` (a scheme of
:mod:`~prefixbench.workloads.hashschemes`, default pbh64) with ``hash_seed=``
for the vLLM schemes, ``limit=N`` lines.  Token ids must fit in u32.
"""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Iterator

import numpy as np

from prefixbench.blockids import DEFAULT_BLOCK_SIZE
from prefixbench.errors import ConfigError, TraceFormatError
from prefixbench.hookspecs import hookimpl
from prefixbench.units import int_in_range
from prefixbench.workloads.hashschemes import make_hash_scheme
from prefixbench.workloads.model import Request, Workload

U32 = 0xFFFFFFFF
_EMPTY = np.empty(0, dtype=np.uint32)


def _token_list(obj: dict, key: str, where: str, required: bool) -> np.ndarray:
    v = obj.get(key)
    if v is None:
        if required:
            raise TraceFormatError(f"{where}: missing field '{key}'")
        return _EMPTY
    if not isinstance(v, list):
        raise TraceFormatError(f"{where}: '{key}' must be a list of token ids, "
                               f"got {type(v).__name__}")
    for j, x in enumerate(v):
        if type(x) is not int:
            raise TraceFormatError(f"{where}: {key}[{j}] is {x!r}, not an integer")
    a = np.array(v, dtype=np.int64) if v else np.empty(0, dtype=np.int64)
    if a.size and (a.min() < 0 or a.max() > U32):
        j = int(np.nonzero((a < 0) | (a > U32))[0][0])
        raise TraceFormatError(f"{where}: {key}[{j}] = {v[j]} is outside the u32 range "
                               "[0, 4294967295]")
    return a.astype(np.uint32)


def read_token_jsonl(path: str, limit: int | None = None):
    """(sessions, prompts, outputs, timestamps) of a token-jsonl file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError) as e:
            raise TraceFormatError(f"{path}: truncated or corrupt gzip data ({e})") from None
    sessions, prompts, outputs, stamps = [], [], [], []
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except UnicodeDecodeError:
            raise TraceFormatError(f"{where}: not UTF-8 text") from None
        except json.JSONDecodeError as e:
            raise TraceFormatError(f"{where}: invalid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(obj, dict):
            raise TraceFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        sid = obj.get("session_id")
        if sid is not None and not isinstance(sid, (str, int)):
            raise TraceFormatError(f"{where}: 'session_id' must be a string or integer")
        ts = obj.get("timestamp")
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, (int, float))):
            raise TraceFormatError(f"{where}: 'timestamp' must be a number of seconds, got {ts!r}")
        sessions.append(sid)
        prompts.append(_token_list(obj, "prompt_token_ids", where, True))
        outputs.append(_token_list(obj, "output_token_ids", where, False))
        stamps.append(math.nan if ts is None else float(ts))
        if limit is not None and len(prompts) >= limit:
            break
    return sessions, prompts, outputs, np.array(stamps, dtype=np.float64)


class TokenJsonlWorkload(Workload):
    """A token-id log, parsed once; requests are hashed as they are replayed."""

    name = "token-jsonl"

    def __init__(self, path: str, *, block_size: int = DEFAULT_BLOCK_SIZE, namespace: str = "",
                 block_hash: str = "pbh64", hash_options: dict | None = None,
                 limit: int | None = None):
        self.path = str(path)
        self.block_size = int(block_size)
        self.namespace = str(namespace)
        opts = dict(hash_options or {})
        if block_hash == "pbh64":
            opts.setdefault("namespace", self.namespace)
        self.scheme = make_hash_scheme(block_hash, **opts)
        sess, self.prompts, self.outputs, self.timestamps = read_token_jsonl(self.path, limit)
        if not self.prompts:
            raise TraceFormatError(f"{self.path}: no requests (workload token-jsonl needs at "
                                   "least one line with prompt_token_ids)")
        ids: dict = {}
        self.session_of = np.array([ids.setdefault(("s", s) if s is not None else ("l", i),
                                                   len(ids)) for i, s in enumerate(sess)],
                                   dtype=np.int64)
        if not np.isnan(self.timestamps).any():
            self.order = np.argsort(self.timestamps, kind="stable")
        else:
            self.order = np.arange(len(self.prompts))

    def _chain(self, tokens: np.ndarray, parent):
        return self.scheme.chain(tokens, self.block_size, parent)

    def requests(self) -> Iterator[Request]:
        bs = self.block_size
        # per session: (full tokens of the last request, its full-block ids, its last state)
        last: dict[int, tuple[np.ndarray, np.ndarray, object]] = {}
        turns: dict[int, int] = {}
        for r in self.order.tolist():
            s = int(self.session_of[r])
            prompt, out = self.prompts[r], self.outputs[r]
            full = np.concatenate((prompt, out)) if len(out) else prompt
            prev = last.get(s)
            if (prev is not None and len(prev[0]) <= len(full) and len(prev[1])
                    and np.array_equal(full[:len(prev[0])], prev[0])):
                k = len(prev[1])
                new_ids, state = self._chain(full[k * bs:], prev[2])
                ids = np.concatenate((prev[1], new_ids))
                if not len(new_ids):
                    state = prev[2]
            else:
                ids, state = self._chain(full, None)
            last[s] = (full, ids, state)
            t = turns.get(s, 0)
            turns[s] = t + 1
            yield Request(s, t, ids[:len(prompt) // bs], ids, len(prompt))

    def __len__(self) -> int:
        return len(self.prompts)

    def metadata(self) -> dict:
        md = {"workload": self.name, "block_size": self.block_size, "path": self.path,
              "requests": len(self), "namespace": self.namespace}
        md.update(self.scheme.options())
        return md


_OPTIONS = ("path", "block_size", "namespace", "block_hash", "hash_seed", "limit")


def token_jsonl(**options) -> TokenJsonlWorkload:
    """Token-id request logs: prompt_token_ids / output_token_ids per line (path= required)."""
    for key in options:
        if key not in _OPTIONS:
            raise ConfigError(f"option {key}: not an option of workload token-jsonl "
                              f"(options: {', '.join(_OPTIONS)})")
    path = options.get("path")
    if not path:
        raise ConfigError("option path: workload token-jsonl needs path= (a JSONL file of "
                          "prompt_token_ids)")
    if not Path(str(path)).is_file():
        raise ConfigError(f"option path: {path}: no such file")
    hash_opts = {}
    if options.get("hash_seed") not in (None, ""):
        hash_opts["hash_seed"] = str(options["hash_seed"])
    limit = options.get("limit")
    block_size = int_in_range("block_size", options.get("block_size", DEFAULT_BLOCK_SIZE),
                              1, 1 << 20)
    return TokenJsonlWorkload(
        str(path), block_size=block_size,
        namespace=str(options.get("namespace") or ""),
        block_hash=str(options.get("block_hash") or "pbh64"), hash_options=hash_opts,
        limit=None if limit in (None, "") else int_in_range("limit", limit, 1, 10**12))


@hookimpl
def prefixbench_register_workloads(register):
    register("token-jsonl", token_jsonl)
