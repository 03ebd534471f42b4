"""Hash-id traces in Mooncake's format (and Alibaba's session fields).

One JSON object per line, ``hash_ids`` = one id per 512-token block of the
prompt (already prefix-chained by the trace's producer; we chain them again
with :func:`~prefixbench.blockids.chain_ids` so that ids live in
prefixbench's namespace and id space).  There are no output blocks, so a
request matches and inserts the same ids; ``prompt_tokens`` is
``len(hash_ids) * block_size``.

Mooncake has no session ids: every request is its own session with one turn,
and the replay order is the file order.  When lines carry Alibaba-style
``chat_id`` / ``parent_chat_id`` fields, requests whose parent chat is known
join that chat's session as its next turn (``turn`` fields are not needed).

The whole file is parsed once into NumPy arrays (the sample traces are a
few MB), so :meth:`HashTraceWorkload.requests` only slices.

Alibaba's Qwen/Bailian traces (``qwen_traceA_blksz_16.jsonl``, the ATC'25
KVCache-in-the-wild release) have one object per request: ``chat_id``,
``parent_chat_id`` (-1 for a conversation's first turn), ``timestamp``
(seconds), ``input_length``, ``output_length``, ``type``, ``turn`` and
``hash_ids`` of 16-token blocks, the last one partial.  The ``bailian``
workload reads them with ``block_size=16`` (``path=`` required) and takes a
request's prompt as its ``input_length`` tokens rather than whole blocks
(``mooncake`` keeps counting whole 512-token blocks).
"""
from __future__ import annotations

import gzip
import itertools
import json
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from prefixbench.blockids import chain_ids, namespace_seed
from prefixbench.errors import ConfigError, TraceFormatError
from prefixbench.hookspecs import hookimpl
from prefixbench.workloads.model import Request, Workload

#: tokens per hash id in Mooncake's FAST'25 traces
MOONCAKE_BLOCK_SIZE = 512
_U64_LIMIT = 1 << 64
_DATA_DIR = Path("shared") / "data" / "mooncake-fast25"


def _open(path: str):
    """Binary line reader; gzip recognised by its magic bytes, whatever the name."""
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
        return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read trace: {e.strerror or e}") from None
    except ValueError:                  # open() refuses a path with a NUL byte
        raise TraceFormatError(f"{path}: cannot read trace: the path has a NUL byte") from None


def _int_field(obj: dict, key: str, where: str):
    v = obj.get(key)
    if v is None:
        return None
    if type(v) is not int:
        raise TraceFormatError(f"{where}: '{key}' must be an integer, got {v!r}")
    return v


def _hash_ids(obj, where: str) -> list[int]:
    if not isinstance(obj, dict):
        raise TraceFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "hash_ids" not in obj:
        raise TraceFormatError(f"{where}: missing field 'hash_ids'")
    ids = obj["hash_ids"]
    if not isinstance(ids, list):
        raise TraceFormatError(f"{where}: 'hash_ids' must be a list of integers, "
                               f"got {type(ids).__name__}")
    if not all(type(x) is int for x in ids):
        j = next(j for j, x in enumerate(ids) if type(x) is not int)
        raise TraceFormatError(f"{where}: hash_ids[{j}] is {ids[j]!r}, not an integer")
    if ids and min(ids) < 0:
        j = next(j for j, x in enumerate(ids) if x < 0)
        raise TraceFormatError(f"{where}: hash_ids[{j}] is negative ({ids[j]})")
    if ids and max(ids) >= _U64_LIMIT:
        j = next(j for j, x in enumerate(ids) if x >= _U64_LIMIT)
        raise TraceFormatError(f"{where}: hash_ids[{j}] = {ids[j]} does not fit in 64 bits")
    return ids


class HashTraceWorkload(Workload):
    """A hash-id trace, read once; requests are slices of one chained-id array."""

    def __init__(self, path: str | Path, *, block_size: int = MOONCAKE_BLOCK_SIZE,
                 namespace: str | None = None, name: str = "mooncake"):
        if block_size < 1:
            raise ConfigError(f"option block_size: must be at least 1, got {block_size}")
        self.path = str(path)
        self.name = name
        self.block_size = int(block_size)
        self.namespace = name if namespace is None else str(namespace)
        self.h0 = namespace_seed(self.namespace)
        #: prompts are ``input_length`` tokens (Bailian) instead of whole blocks
        self.input_lengths = name == "bailian"
        #: seconds per trace ``timestamp`` unit: Mooncake counts milliseconds, Bailian seconds
        self.time_unit = 1.0 if name == "bailian" else 1e-3
        self._load()

    def _load(self) -> None:
        raw: list[list[int]] = []
        sessions: list[int] = []
        turns: list[int] = []
        prompt_len: list[int] = []
        stamps: list[float] = []
        chat_session: dict[int, int] = {}   # chat_id -> session (Alibaba traces)
        session_turns: list[int] = []
        lineno = 0
        with _open(self.path) as f:
            try:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    where = f"{self.path}:{lineno}"
                    try:
                        obj = json.loads(line)
                    except UnicodeDecodeError:
                        raise TraceFormatError(f"{where}: not UTF-8 text") from None
                    except json.JSONDecodeError as e:
                        raise TraceFormatError(f"{where}: invalid JSON: {e.msg} "
                                               f"(column {e.colno})") from None
                    except RecursionError:
                        raise TraceFormatError(f"{where}: invalid JSON: nested too "
                                               "deeply") from None
                    except ValueError:      # an integer of more than 4300 digits
                        raise TraceFormatError(f"{where}: invalid JSON: a number too long "
                                               "to read") from None
                    raw.append(_hash_ids(obj, where))
                    inp = _int_field(obj, "input_length", where)
                    ts = obj.get("timestamp")
                    stamps.append(float(ts) * self.time_unit
                                  if isinstance(ts, (int, float)) and not isinstance(ts, bool)
                                  and abs(ts) < 1e300 else float("nan"))
                    whole = len(raw[-1]) * self.block_size
                    prompt_len.append(whole if inp is None or inp < 0 or not self.input_lengths
                                      else min(inp, whole))
                    chat = _int_field(obj, "chat_id", where)
                    parent = _int_field(obj, "parent_chat_id", where)
                    s = chat_session.get(parent) if parent is not None else None
                    if s is None:
                        s = len(session_turns)
                        session_turns.append(0)
                    if chat is not None:
                        chat_session[chat] = s
                    sessions.append(s)
                    turns.append(session_turns[s])
                    session_turns[s] += 1
            except (EOFError, gzip.BadGzipFile, zlib.error) as e:
                raise TraceFormatError(f"{self.path}:{lineno + 1}: truncated or corrupt "
                                       f"gzip data ({e})") from None
            except OSError as e:
                raise TraceFormatError(f"{self.path}:{lineno + 1}: read error: "
                                       f"{e.strerror or e}") from None
        lengths = np.fromiter((len(r) for r in raw), dtype=np.int64, count=len(raw))
        self._offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        total = int(self._offsets[-1])
        #: the trace's own ids, flat (kept for checks against the trace's documentation)
        self.raw_ids = np.fromiter(itertools.chain.from_iterable(raw), dtype=np.uint64, count=total)
        ids = np.empty(total, dtype=np.uint64)
        off = self._offsets.tolist()
        for r in range(len(raw)):
            a, b = off[r], off[r + 1]
            if b > a:
                ids[a:b] = chain_ids(self.raw_ids[a:b], self.h0)
        self._ids = ids
        self._sessions = np.array(sessions, dtype=np.int64)
        self._turns = np.array(turns, dtype=np.int64)
        self._prompt = np.array(prompt_len, dtype=np.int64)
        #: arrival time of each request in seconds (NaN where the line has none)
        self.timestamps = np.array(stamps, dtype=np.float64)

    def requests(self) -> Iterator[Request]:
        """File order; ``match_ids == insert_ids`` (the trace has no output blocks)."""
        ids, bs = self._ids, self.block_size
        off = self._offsets.tolist()
        prompt = self._prompt.tolist()
        for r, (s, t) in enumerate(zip(self._sessions.tolist(), self._turns.tolist())):
            seq = ids[off[r]:off[r + 1]]
            yield Request(s, t, seq, seq, prompt[r])

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def n_blocks(self) -> int:
        """Blocks over all requests (with repeats)."""
        return int(self._offsets[-1])

    def metadata(self) -> dict:
        return {"workload": self.name, "block_size": self.block_size,
                "namespace": self.namespace, "path": self.path, "requests": len(self)}


# -- plugin registration ------------------------------------------------------
_OPTIONS = ("path", "block_size", "namespace")


def find_trace(stem: str) -> Path:
    """``../shared/data/mooncake-fast25/<stem>.jsonl[.gz]`` next to the checkout or cwd."""
    roots = [Path(__file__).resolve().parents[1], Path.cwd()]
    looked = []
    for root in roots:
        folder = root.parent / _DATA_DIR
        for ext in (".jsonl.gz", ".jsonl"):
            cand = folder / (stem + ext)
            if cand.is_file():
                return cand
        looked.append(str(folder))
    raise ConfigError(f"option path: no {stem}.jsonl[.gz] found in "
                      f"{' or '.join(dict.fromkeys(looked))}; pass path=/path/to/{stem}.jsonl.gz")


def make_trace_workload(name: str, stem: str, **options) -> HashTraceWorkload:
    """Build a hash-id trace workload from (possibly string) options."""
    for key in options:
        if key not in _OPTIONS:
            raise ConfigError(f"option {key}: not an option of workload {name} "
                              f"(options: {', '.join(_OPTIONS)})")
    path = options.get("path")
    if path is None or path == "":
        path = find_trace(stem)
    elif not isinstance(path, (str, Path)):
        raise ConfigError(f"option path: must be a file path, got {path!r}")
    block_size = options.get("block_size", MOONCAKE_BLOCK_SIZE)
    if isinstance(block_size, bool) or isinstance(block_size, float):
        raise ConfigError(f"option block_size: {block_size!r} is not a valid int")
    try:
        block_size = int(block_size)
    except (TypeError, ValueError):
        raise ConfigError(f"option block_size: {block_size!r} is not a valid int") from None
    if not 1 <= block_size <= 1 << 20:
        raise ConfigError(f"option block_size: must be in [1, {1 << 20}], got {block_size}")
    namespace = options.get("namespace")
    if namespace is not None and (not isinstance(namespace, (str, int)) or namespace == ""):
        raise ConfigError(f"option namespace: must be a non-empty string, got {namespace!r}")
    return HashTraceWorkload(path, block_size=block_size, namespace=namespace, name=name)


def mooncake(**options) -> HashTraceWorkload:
    """Mooncake FAST'25 conversation trace (hash ids of 512-token blocks)."""
    return make_trace_workload("mooncake", "conversation_trace", **options)


def mooncake_synthetic(**options) -> HashTraceWorkload:
    """Mooncake FAST'25 synthetic trace (public datasets, Poisson arrivals)."""
    return make_trace_workload("mooncake-synthetic", "synthetic_trace", **options)


def bailian(**options) -> HashTraceWorkload:
    """Alibaba Qwen/Bailian trace (hash ids of 16-token blocks; path= required)."""
    if not options.get("path"):
        raise ConfigError("option path: workload bailian needs path= (e.g. "
                          "qwen_traceA_blksz_16.jsonl)")
    options.setdefault("block_size", 16)
    return make_trace_workload("bailian", "qwen_traceA_blksz_16", **options)


@hookimpl
def prefixbench_register_workloads(register):
    register("mooncake", mooncake)
    register("mooncake-synthetic", mooncake_synthetic)
    register("bailian", bailian)
