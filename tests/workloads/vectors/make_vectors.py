"""One-off script that computed ``block_hash_vectors.json`` (kept for provenance).

It never imports prefixbench, so the vectors are an independent check of
``prefixbench.workloads.hashschemes``.  How each scheme's ids were computed:

* ``dynamo-xxh3``: local block hashes from the upstream package itself,
  ``dynamo._core.compute_block_hash_for_seq`` of ai-dynamo-runtime 1.6.1
  (``pip install ai-dynamo-runtime``); the sequence-hash recurrence of
  ``compute_seq_hash_for_block`` (the Rust function is not exported to
  Python) written out here with the xxhash package.
* ``sglang-sha256``: ``get_hash_str`` read out of the sglang 0.5.5 wheel
  (``pip download --no-deps sglang==0.5.5``, file
  ``sglang/srt/mem_cache/hicache_storage.py``) and executed on its own (the
  module imports torch, which does not install here), plus
  ``hash_str_to_int64`` from the sglang 0.5.23 wheel's ``mem_cache/utils.py``.
* ``vllm-sha256-cbor`` / ``vllm-xxhash``: vLLM needs torch and CUDA wheels
  and does not install here, so v0.17.0's functions are composed from the
  packages they call: ``hash_block_tokens`` = ``hash_fn((parent or NONE_HASH,
  tuple(tokens), extra_keys))``, ``sha256_cbor`` = ``sha256(cbor2.dumps(x,
  canonical=True))``, ``xxhash_cbor`` = ``xxh3_128_digest`` of the same,
  ``init_none_hash`` = ``hash_fn(PYTHONHASHSEED)``, ``maybe_convert_block_hash``
  = ``int.from_bytes(digest, "big") & (2**64 - 1)``; cbor2 6.3.0, xxhash 4.1.0.

Run (the environment that has ai-dynamo-runtime, cbor2 and xxhash)::

    python make_vectors.py SGLANG_055_DIR SGLANG_0523_DIR > block_hash_vectors.json
"""
from __future__ import annotations

import ast
import hashlib
import json
import random
import sys
from importlib.metadata import version

import cbor2
import xxhash

MASK = (1 << 64) - 1


def load_function(path: str, name: str):
    """``def name`` from a source file, executed alone (the module's imports are not)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    mod = ast.Module(body=[fn], type_ignores=[])
    ns = {"hashlib": hashlib, "List": list, "Optional": None}
    exec(compile(mod, path, "exec"), ns)
    return ns[name]


def vllm(hash_fn, tokens, bs, seed, extra):
    none_hash = hash_fn(seed)
    parent, out = None, []
    for b in range(len(tokens) // bs):
        ek = None if extra is None else tuple(extra[b]) if extra[b] is not None else None
        d = hash_fn((parent or none_hash, tuple(tokens[b * bs:(b + 1) * bs]), ek))
        out.append(int.from_bytes(d, "big") & MASK)
        parent = d
    return out


def main() -> None:
    sgl055, sgl0523 = sys.argv[1], sys.argv[2]
    get_hash_str = load_function(f"{sgl055}/sglang/srt/mem_cache/hicache_storage.py", "get_hash_str")
    to_int64 = load_function(f"{sgl0523}/sglang/srt/mem_cache/utils.py", "hash_str_to_int64")
    import dynamo._core as dyn

    sha256_cbor = lambda x: hashlib.sha256(cbor2.dumps(x, canonical=True)).digest()  # noqa: E731
    xxhash_cbor = lambda x: xxhash.xxh3_128_digest(cbor2.dumps(x, canonical=True))  # noqa: E731

    rng = random.Random(15)
    edge = [0, 1, 23, 24, 255, 256, 65535, 65536, 4294967295, 16777216, 100, 1000, 2, 3, 4, 5]
    token_sets = {
        "iota64": list(range(64)),
        "edge16x2": edge + edge[::-1],
        "random48": [rng.randrange(0, 152064) for _ in range(48)],
        "random40-partial": [rng.randrange(0, 1 << 32) for _ in range(40)],
    }
    cases = []
    for tname, toks in token_sets.items():
        for bs in (16, 4):
            for seed in ("0", "42"):
                for scheme, fn in (("vllm-sha256-cbor", sha256_cbor), ("vllm-xxhash", xxhash_cbor)):
                    cases.append({"scheme": scheme, "options": {"hash_seed": seed},
                                  "tokens_name": tname, "block_size": bs, "tokens": toks,
                                  "ids": vllm(fn, toks, bs, seed, None)})
            prior, ids, wire = None, [], []
            for b in range(len(toks) // bs):
                h = get_hash_str(toks[b * bs:(b + 1) * bs], prior)
                wire.append(to_int64(h))
                ids.append(to_int64(h) & MASK)
                prior = h
            cases.append({"scheme": "sglang-sha256", "options": {}, "tokens_name": tname,
                          "block_size": bs, "tokens": toks, "ids": ids, "wire": wire})
            local = [int(x) for x in dyn.compute_block_hash_for_seq(toks, bs)]
            seq = []
            for lh in local:
                seq.append(lh if not seq else xxhash.xxh3_64_intdigest(
                    seq[-1].to_bytes(8, "little") + lh.to_bytes(8, "little"), seed=1337))
            cases.append({"scheme": "dynamo-xxh3", "options": {}, "tokens_name": tname,
                          "block_size": bs, "tokens": toks, "local": local, "ids": seq})
    lora = [["my-lora"]] * 4
    for scheme, fn in (("vllm-sha256-cbor", sha256_cbor), ("vllm-xxhash", xxhash_cbor)):
        cases.append({"scheme": scheme, "options": {"hash_seed": "0"}, "tokens_name": "iota64",
                      "block_size": 16, "tokens": token_sets["iota64"], "extra_keys": lora,
                      "ids": vllm(fn, token_sets["iota64"], 16, "0", lora)})
    doc = {
        "provenance": {
            "script": "tests/workloads/vectors/make_vectors.py",
            "ai-dynamo-runtime": version("ai-dynamo-runtime"),
            "sglang get_hash_str": "0.5.5 wheel, sglang/srt/mem_cache/hicache_storage.py",
            "sglang hash_str_to_int64": "0.5.23 wheel, sglang/srt/mem_cache/utils.py",
            "vllm": "v0.17.0 functions composed from cbor2 + hashlib + xxhash (vllm needs torch; not installed here)",
            "cbor2": version("cbor2"), "xxhash": version("xxhash"),
            "python": sys.version.split()[0],
        },
        "cases": cases,
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
