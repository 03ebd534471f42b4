"""Block-hash schemes: how a serving engine names a block of tokens.

A token workload chains block ids with prefixbench's own pbh64 by default.
Real deployments publish ids from their engine's own scheme, so a capture
of their KV events (or a router fed by them) only agrees with prefixbench
when both hash the same way.  ``-W block_hash=NAME`` picks one of:

``pbh64`` (default)
    :mod:`prefixbench.blockids`: ``h_0 = namespace_seed(namespace)``.

``vllm-sha256-cbor``
    vLLM v0.17.0 ``hash_block_tokens`` with ``sha256_cbor``
    (``vllm/v1/core/kv_cache_utils.py``, ``vllm/utils/hashing.py``): block
    digest = SHA-256 of the canonical CBOR encoding of the 3-tuple
    ``(parent digest or NONE_HASH, tuple(block tokens), extra_keys)``; the
    parent is the full 32-byte digest.  ``NONE_HASH = sha256_cbor(seed)``
    where ``seed`` is the engine's ``PYTHONHASHSEED`` string (option
    ``hash_seed``, default ``"0"``; a vLLM started without PYTHONHASHSEED
    draws NONE_HASH from ``os.urandom`` and its ids cannot be reproduced by
    anyone).  The published 64-bit id is ``maybe_convert_block_hash``: the
    digest read big-endian, masked to 64 bits (its last 8 bytes).

``vllm-xxhash``
    The same with vLLM v0.17.0's ``xxhash_cbor``: XXH3-128 of the same CBOR
    bytes (16-byte digests).  vLLM's pickle-based ``xxhash`` setting hashes
    Python pickles, which no other language reproduces; it is not offered.

``sglang-sha256``
    SGLang's page hash (``get_hash_str`` in
    ``sglang/srt/mem_cache/hicache_storage.py`` of 0.5.5, moved to
    ``mem_cache/utils.py`` by 0.5.23): SHA-256 over the prior page's 32-byte
    digest (nothing for the first page) then every token as u32
    little-endian.  Events publish ``hash_str_to_int64``: the first 8 digest
    bytes big-endian as a signed int64; prefixbench keeps the same 64 bits
    unsigned.  (SGLang 0.5.5's own events still used Python's ``hash()`` of
    the page tuple, unchained; 0.5.23's events use this hash.)

``dynamo-xxh3``
    NVIDIA Dynamo's router (``lib/llm/src/kv_router/indexer.rs``,
    ai-dynamo 1.6.1): local block hash = XXH3-64 with seed 1337 over the
    tokens as u32 little-endian; sequence hash of block 0 = its local hash,
    of block i = XXH3-64 (seed 1337) of ``seq[i-1]`` then ``local[i]`` as
    u64 little-endian.  The sequence hash is the block id.  Multimodal,
    LoRA and cache-namespace inputs are not modelled.

Each scheme's ``chain(tokens, block_size, parent)`` returns the 64-bit ids of
every full block after ``parent`` (a scheme *state*: the full digest, or the
id itself for 64-bit schemes; None for the first block) and the last
block's state.  Token encodings are built with NumPy for the whole
sequence at once; only the per-block digest call is a Python call (hashlib
and xxhash are C).  Golden vectors: ``tests/workloads/vectors/``.
"""
from __future__ import annotations

import hashlib
from typing import Callable

import numpy as np

from prefixbench.blockids import chain_tokens, namespace_seed
from prefixbench.errors import ConfigError, MissingDependencyError

MASK64 = (1 << 64) - 1
DEFAULT_SCHEME = "pbh64"


def _xxhash():
    try:
        import xxhash
    except ImportError:
        raise MissingDependencyError("block_hash vllm-xxhash and dynamo-xxh3 need the 'xxhash' "
                                     "package: pip install xxhash") from None
    return xxhash


def _tokens_u32(tokens) -> np.ndarray:
    a = np.asarray(tokens)
    if a.dtype != np.uint32:
        if a.size and (a.dtype.kind not in "iu" or int(a.min()) < 0 or int(a.max()) > 0xFFFFFFFF):
            bad = next(int(x) for x in a.ravel() if not 0 <= int(x) <= 0xFFFFFFFF)
            raise ConfigError(f"token id {bad} is outside the u32 range [0, 4294967295]")
        a = a.astype(np.uint32)
    return np.ascontiguousarray(a)


# -- canonical CBOR for (bytes, tuple[int], extra) ----------------------------
def _cbor_head(major: int, n: int) -> bytes:
    """A CBOR head with the shortest argument encoding (RFC 8949 preferred form)."""
    m = major << 5
    if n < 24:
        return bytes((m | n,))
    if n < 1 << 8:
        return bytes((m | 24, n))
    if n < 1 << 16:
        return bytes((m | 25,)) + n.to_bytes(2, "big")
    if n < 1 << 32:
        return bytes((m | 26,)) + n.to_bytes(4, "big")
    return bytes((m | 27,)) + n.to_bytes(8, "big")


def cbor_uint_array(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each u32 token's CBOR unsigned-integer encoding, concatenated.

    Returns the bytes and the offsets of every token's encoding (``len + 1``
    entries), so block ``b`` is ``buf[off[b*bs]:off[(b+1)*bs]]``.
    """
    t = tokens.astype(np.uint64)
    size = np.where(t < 24, 1, np.where(t < 256, 2, np.where(t < 65536, 3, 5))).astype(np.int64)
    off = np.zeros(len(t) + 1, dtype=np.int64)
    np.cumsum(size, out=off[1:])
    buf = np.zeros(int(off[-1]), dtype=np.uint8)
    start = off[:-1]
    small = size == 1
    buf[start[small]] = t[small]
    for width, tag in ((2, 24), (3, 25), (5, 26)):
        sel = size == width
        if not sel.any():
            continue
        s, v = start[sel], t[sel]
        buf[s] = tag
        nbytes = width - 1
        for k in range(nbytes):
            buf[s + 1 + k] = (v >> np.uint64(8 * (nbytes - 1 - k))) & np.uint64(0xFF)
    return buf, off


def _cbor_extra(extra) -> bytes:
    if extra is None:
        return b"\xf6"
    import cbor2
    return cbor2.dumps(tuple(extra) if isinstance(extra, list) else extra, canonical=True)


class HashScheme:
    """A named block-hash scheme (see the module docstring)."""

    name = ""
    upstream = ""
    #: True when the state carried from block to block is the 64-bit id itself
    state_is_id = False
    #: the wire form of an id is a signed int64 (SGLang)
    signed = False

    def chain(self, tokens, block_size: int, parent=None, extra_keys=None):
        raise NotImplementedError

    def state_from_wire(self, value):
        """The chaining state a published parent hash gives, or None when a 64-bit
        value cannot stand for the full digest (look it up instead)."""
        if isinstance(value, (bytes, bytearray)):
            return bytes(value) if not self.state_is_id else int.from_bytes(value, "big") & MASK64
        return (int(value) & MASK64) if self.state_is_id else None

    def wire(self, block_id: int) -> int:
        """An id as the engine publishes it."""
        v = int(block_id) & MASK64
        return v - (1 << 64) if self.signed and v >= 1 << 63 else v

    def options(self) -> dict:
        return {"block_hash": self.name}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class Pbh64Scheme(HashScheme):
    name = "pbh64"
    upstream = "prefixbench pbh64 (prefixbench.blockids)"
    state_is_id = True

    def __init__(self, namespace: str = ""):
        self.namespace = namespace
        self.h0 = namespace_seed(namespace)

    def chain(self, tokens, block_size: int, parent=None, extra_keys=None):
        h = self.h0 if parent is None else int(parent)
        ids = chain_tokens(_tokens_u32(tokens), block_size, h)
        return ids, (int(ids[-1]) if len(ids) else parent)


class VllmScheme(HashScheme):
    """vLLM's ``hash_block_tokens`` with a CBOR-based hash function."""

    def __init__(self, digest: Callable[[bytes], bytes], name: str, hash_seed: str = "0"):
        self.name = name
        self.upstream = ("vLLM v0.17.0 hash_block_tokens + "
                         + ("sha256_cbor" if name.endswith("cbor") else "xxhash_cbor")
                         + " (cbor2 canonical), maybe_convert_block_hash")
        self._digest = digest
        self.hash_seed = str(hash_seed)
        seed = self.hash_seed.encode("utf-8")
        self.none_hash = digest(_cbor_head(3, len(seed)) + seed)

    def chain(self, tokens, block_size: int, parent=None, extra_keys=None):
        toks = _tokens_u32(tokens)
        n = len(toks) // block_size
        out = np.empty(n, dtype=np.uint64)
        if n == 0:
            return out, parent
        buf, off = cbor_uint_array(toks[:n * block_size])
        raw = buf.tobytes()
        offs = off[::block_size].tolist()
        arr = b"\x83"
        head = _cbor_head(4, block_size)
        prev = parent if parent else self.none_hash
        digest = self._digest
        for b in range(n):
            extra = b"\xf6" if extra_keys is None else _cbor_extra(extra_keys[b])
            d = digest(b"".join((arr, _cbor_head(2, len(prev)), prev, head,
                                 raw[offs[b]:offs[b + 1]], extra)))
            out[b] = int.from_bytes(d[-8:], "big")
            prev = d
        return out, prev

    def options(self) -> dict:
        return {"block_hash": self.name, "hash_seed": self.hash_seed}


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class SglangScheme(HashScheme):
    name = "sglang-sha256"
    upstream = "SGLang 0.5.5 get_hash_str (mem_cache), 0.5.23 hash_str_to_int64"
    signed = True

    def chain(self, tokens, block_size: int, parent=None, extra_keys=None):
        toks = _tokens_u32(tokens)
        n = len(toks) // block_size
        out = np.empty(n, dtype=np.uint64)
        raw = toks[:n * block_size].astype("<u4").tobytes()
        step = 4 * block_size
        prev = parent or b""
        sha = hashlib.sha256
        for b in range(n):
            d = sha(prev + raw[b * step:(b + 1) * step]).digest()
            out[b] = int.from_bytes(d[:8], "big")
            prev = d
        return out, (prev if n else parent)


class DynamoScheme(HashScheme):
    name = "dynamo-xxh3"
    upstream = ("ai-dynamo 1.6.1 kv_router compute_block_hash_for_seq (XXH3-64 seed 1337) + "
                "compute_seq_hash_for_block")
    state_is_id = True
    SEED = 1337

    def __init__(self):
        self._xx = _xxhash()

    def local_hashes(self, tokens, block_size: int) -> np.ndarray:
        toks = _tokens_u32(tokens)
        n = len(toks) // block_size
        raw = toks[:n * block_size].astype("<u4").tobytes()
        step = 4 * block_size
        h = self._xx.xxh3_64_intdigest
        return np.fromiter((h(raw[b * step:(b + 1) * step], self.SEED) for b in range(n)),
                           dtype=np.uint64, count=n)

    def chain(self, tokens, block_size: int, parent=None, extra_keys=None):
        local = self.local_hashes(tokens, block_size)
        n = len(local)
        out = np.empty(n, dtype=np.uint64)
        h = self._xx.xxh3_64_intdigest
        prev = None if parent is None else int(parent)
        pair = np.empty(2, dtype="<u8")
        for b, lh in enumerate(local.tolist()):
            if prev is None:
                prev = lh
            else:
                pair[0], pair[1] = prev, lh
                prev = h(pair.tobytes(), self.SEED)
            out[b] = prev
        return out, (prev if n else parent)


def _xxh3_128(data: bytes) -> bytes:
    return _xxhash().xxh3_128_digest(data)


_OPTIONS = {
    "pbh64": ("namespace",),
    "vllm-sha256-cbor": ("hash_seed",),
    "vllm-xxhash": ("hash_seed",),
    "sglang-sha256": (),
    "dynamo-xxh3": (),
}
SCHEMES = tuple(_OPTIONS)


def make_hash_scheme(name: str = DEFAULT_SCHEME, **options) -> HashScheme:
    """A block-hash scheme by name; unknown names and options list the valid ones."""
    name = str(name or DEFAULT_SCHEME)
    if name not in _OPTIONS:
        raise ConfigError(f"option block_hash: unknown scheme {name!r}; available: "
                          f"{', '.join(SCHEMES)}")
    for key in options:
        if key not in _OPTIONS[name]:
            raise ConfigError(f"option {key}: not an option of block_hash {name} "
                              f"(options: {', '.join(_OPTIONS[name]) or 'none'})")
    if name == "pbh64":
        return Pbh64Scheme(str(options.get("namespace", "")))
    if name == "vllm-sha256-cbor":
        return VllmScheme(_sha256, name, options.get("hash_seed", "0"))
    if name == "vllm-xxhash":
        _xxhash()
        return VllmScheme(_xxh3_128, name, options.get("hash_seed", "0"))
    if name == "sglang-sha256":
        return SglangScheme()
    return DynamoScheme()


class SchemeChain:
    """A ``chain_tokens``-shaped callable ``(tokens, block_size, h)`` over a scheme,
    for :func:`~prefixbench.workloads.model.replay_turns`: ``h`` is :attr:`h0` for a
    root turn, else the id of the context's last block, whose full state is
    remembered from the call that produced it (one entry per call, not per block)."""

    def __init__(self, scheme: HashScheme):
        self.scheme = scheme
        self.h0 = getattr(scheme, "h0", 0)
        self._state: dict[int, object] = {}

    def __call__(self, tokens, block_size: int, h: int) -> np.ndarray:
        s = self.scheme
        if s.state_is_id:
            parent = None if h == self.h0 else h
        else:
            parent = None if h == self.h0 and h not in self._state else self._state[int(h)]
        ids, last = s.chain(tokens, block_size, parent)
        if len(ids) and not s.state_is_id:
            self._state[int(ids[-1])] = last
        return ids
