"""Two synthetic profiles shaped like the sparse-prefix-caching paper's data.

Both are :class:`~prefixbench.workloads.profiles.Profile` knob sets replayed
by :class:`~prefixbench.workloads.synthetic.SyntheticWorkload`; the shared
"system prompt" piece carries what the requests share.

``document-qa`` (QuALITY-like): many questions about one long document.  A
pool of 8 documents of 3k-12k tokens (log-uniform); every session opens
with one of them, asks a short question, gets a short answer and sometimes
asks a follow-up.  Later sessions overlap an earlier one to the
end of their shared document (a different depth per document), follow-ups
overlap their own previous turn to its end.

``system-prompts``: long shared system prompts, then diverse requests.  Two
groups of 300 sessions; each group has 4 prompts of 1k-6k tokens that all
open with a 512-token head common to every group (an assistant framework's
instructions before each product's own), then the user's own request and
sometimes a second turn.  Overlaps stop at the head, at a prompt's end, or
at the end of the session's previous turn.

Options as for the other synthetic profiles: ``sessions=``, ``scale=``,
``seed=``, ``length_scale=``, ``namespace=``, ``block_size=``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from prefixbench.blockids import DEFAULT_BLOCK_SIZE
from prefixbench.errors import ConfigError
from prefixbench.hookspecs import hookimpl
from prefixbench.workloads.profiles import Profile, Range
from prefixbench.workloads.synthetic import SyntheticWorkload, _parse


@dataclass(frozen=True)
class DocumentQA(Profile):
    """Many short questions about a few long documents."""

    name: str = "document-qa"
    summary: str = "QuALITY-like: many questions about one long document, short answers"
    sessions: int = 800
    turns: Range = (1, 2)
    system_prompts: int = 8                # the documents
    system_tokens: Range = (3000, 12000)   # a document's length
    first_input_tokens: Range = (10, 60)   # the question
    input_tokens: Range = (10, 60)         # a follow-up question
    output_tokens: Range = (20, 200)       # the answer


@dataclass(frozen=True)
class SystemPrompts(Profile):
    """Long shared system prompts (with a common head), then diverse requests."""

    name: str = "system-prompts"
    summary: str = "long shared system prompts with a common head, then diverse requests"
    sessions: int = 600
    turns: Range = (1, 2)
    group_sessions: int = 300
    system_prompts: int = 4
    system_tokens: Range = (1000, 6000)
    system_head_tokens: int = 512
    first_input_tokens: Range = (20, 400)
    input_tokens: Range = (20, 300)
    output_tokens: Range = (50, 400)


PROFILES = {cls.name: cls for cls in (DocumentQA, SystemPrompts)}
_OPTIONS = ("sessions", "scale", "seed", "length_scale", "namespace", "block_size")


def make_placement_profile(name: str, **options) -> SyntheticWorkload:
    """The profile ``name`` with (possibly string) options parsed and checked."""
    cls = PROFILES[name]
    for key in options:
        if key not in _OPTIONS:
            raise ConfigError(f"option {key}: not an option of workload {name} "
                              f"(options: {', '.join(_OPTIONS)})")
    base = cls()
    knobs = {}
    sessions = base.sessions
    if "sessions" in options:
        sessions = _parse("sessions", options["sessions"], int, 1, 10**9)
    if "scale" in options:
        sessions = max(1, round(sessions * _parse("scale", options["scale"], float, 1e-9, 1e6)))
    knobs["sessions"] = sessions
    if "seed" in options:
        knobs["seed"] = _parse("seed", options["seed"], int, 0, 2**63 - 1)
    if "length_scale" in options:
        knobs["length_scale"] = _parse("length_scale", options["length_scale"], float, 1e-6, 1000)
    block_size = DEFAULT_BLOCK_SIZE
    if "block_size" in options:
        block_size = _parse("block_size", options["block_size"], int, 1, 1 << 20)
    namespace = options.get("namespace")
    if namespace is not None and (not isinstance(namespace, (str, int)) or namespace == ""):
        raise ConfigError(f"option namespace: must be a non-empty string, got {namespace!r}")
    assert set(knobs) <= {f.name for f in fields(cls)}
    return SyntheticWorkload(replace(base, **knobs).validate(), block_size=block_size,
                             namespace=namespace)


def _factory(name: str):
    def factory(**options) -> SyntheticWorkload:
        return make_placement_profile(name, **options)
    factory.__name__ = factory.__qualname__ = f"make_{name.replace('-', '_')}"
    factory.__doc__ = PROFILES[name].summary
    return factory


@hookimpl
def prefixbench_register_workloads(register):
    for name, cls in PROFILES.items():
        register(name, _factory(name), summary=cls.summary)
