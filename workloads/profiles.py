"""The four synthetic workload profiles, shaped like the SARP paper's data sets.

Every knob of :mod:`prefixbench.workloads.synthetic` lives here, one frozen
dataclass per profile, so the shape of each workload can be read (and argued
about) in one place.  Lengths are in tokens; a ``(lo, hi)`` pair is drawn
log-uniformly per message, which gives the long right tail real chat and tool
messages have.  Token ids are uniform below ``vocab`` (Llama-2's 32,000), so
two messages share blocks only where the profile makes them share a prefix:

* a shared **system prompt** (agents) - every session through it is one path;
* a shared **task prompt** after it (CodeAct: several trajectories per task);
* a pooled **opener** at the start of the first user message (UltraChat's
  colliding openings; a rare duplicate opening in EABF);
* **forks**: a turn that continues an earlier turn instead of the last one.

Only ``sessions``, ``seed`` and ``length_scale`` are meant to be overridden
(the ``sessions=``, ``scale=``, ``seed=``, ``length_scale=`` workload options),
plus ``preset=paper`` for the paper's sizes (below); the other knobs are the
calibration.

Calibration
-----------
:func:`prefixbench.workloads.describe.describe` on the default sizes (block
size 16, seed 0; the range over seeds 0-2 in brackets) against the paper:
spans with more than three alternatives (section 3.2), candidates per
routing entry before filtering (Table 4; ours is a base-routing-point proxy,
see :mod:`.describe`), and candidates ruled out by the block right after
the routing point (section 4.2, Figure 3; the paper: 93% stop matching at
the 14th token, CodeAct only)::

    profile        spans > 3 alternatives         candidates / routing entry   ruled out
                   measured              paper    measured             paper   by next block
    codeact        21.31% (21.3-23.1)    21.31%   59.6 (53.2-61.5)     59.3    96.4% (paper 93%)
    lmcache-agent   0.59% (0.58-0.60)     0.60%    1.81 (1.80-1.81)     1.78   -
    eabf            1.78% (1.73-1.87)     1.78%    1.02 (1.02-1.06)     1.01   -
    ultrachat      16.88% (16.55-16.88)  16.85%   24.2 (21.4-24.2)     24.3   -

Both statistics depend on size: the share of spans on session length, the
candidate counts on how many sessions share a prefix.  Runs with more
``sessions=`` of one profile keep the span share and grow the candidate sets
(one system prompt heard by every session: sarp's refinement then splits its
posting list, and its Table 4 figure on codeact falls from 59.6 at 200
sessions to 11.5 at 2,000); ``length_scale`` changes both.

The paper's sizes
-----------------
The paper's budgets are 10% of ssd-blockhash's uncompressed store at 24 B
per indexed block (:data:`PAPER_BLOCKS`: 2.2M, 7.0M, 12.7M, 158M blocks).
``preset=paper`` (:func:`paper_workload_options` for a fraction) grows a
profile the way a larger data set grows: by more *sources*, not by a larger
audience per prompt.  A data set ten times larger has about ten times the
tasks, system-prompt variants and conversation openings, and each is heard
by about as many sessions as before - a system prompt's audience is the
trajectories generated with it, an opening's the users who typed it.  So
sessions fall into sharing groups of ``group_sessions`` (session ``i`` in
group ``i % groups``), and every group draws its system prompts, task
prompts and openers from pools of its own, of the profile's per-group sizes.

Two consequences are calibrated, not left to chance:

* agent frameworks share their instructions: the groups' system prompts of
  codeact and lmcache-agent open with one common head (``system_head_tokens``)
  and diverge at block 48 (codeact) / 176 (lmcache-agent), the first block of
  a span that already has many alternatives at the small size (the task or
  the user's first message starts there).  Without the head every history's
  first span would have one alternative per group (codeact: 35% of spans
  above three alternatives instead of 21%);
* ultrachat's groups hold 2,650 sessions per 40 openings, not the default
  2,000: the default was calibrated on the describe proxy, and sarp's own
  Table 4 figure at 2,000 per group is 19.4 (-20%); at 2,650 it is 24.0.

Sessions for a block target use :data:`BLOCKS_PER_SESSION` (shared pieces
are per group, so blocks per session do not drift with size).  Measured at
the paper's size (seed 0, block size 16; ``describe`` for the span share,
sarp on the memory engine with ``backfill=sync`` for Table 4's
``candidates_before_filtering``; the small size's sarp figure beside it)::

    profile        size          unique blocks   spans > 3 (paper)    Table 4 (paper)   small: sarp
    codeact        1             2,211,228       21.83% (21.31%)      62.6 (59.3)        59.6
    lmcache-agent  1             6,926,528        0.60%  (0.60%)      1.82 (1.78)        1.81
    eabf           1            12,891,669        1.79%  (1.78%)      1.04 (1.01)        1.02
    ultrachat      1/4          39,681,931       16.83% (16.85%)      24.1 (24.3)        19.9
    ultrachat      1/8          19,815,602       16.85% (16.85%)      24.0 (24.3)        19.9

All within 25% of the paper (the largest gap: codeact's Table 4, +5.6%).  The
describe proxy agrees except on ultrachat at the paper preset (30.3): sarp's
refinement splits the largest opening lists there, the proxy does not.
Ultrachat's full 158M blocks do not fit here.  Generation streams: the
replay holds no tokens, only the block ids of turns a later turn continues
(under round-robin every session's history, about 8 B per unique block:
eabf's 12.9M blocks replay in 130 MB peak).  But ``describe``'s exact trie
takes 230-340 B per block (9.0 GB at ultrachat's 39.7M) and the sarp replay
with its radix shadow about 80 B and 16-24 us per block (3.1 GB and 11
minutes at 39.7M), so the full size would need some 36-50 GB for describe
(this machine has 23 GB) and about 45 minutes for sarp: 1/4 is the largest
power-of-two fraction measured for both.

Table 4's *after filtering* column (candidates tied at the best filter
potential L*) is not calibrated: 1.84 on codeact (paper 31.1) and 1.01 on
lmcache-agent (paper 1.66) at the default sizes, as low at the paper's sizes.
Counted per routing entry a match uses (sarp, memory engine, seed 0): on
codeact, 60% of uses reach an entry with more than three candidates (99 on
average); 1,053 of these 1,202 uses are at block 48 of the window, where the
profile's alternatives branch; in 83% of the 1,202 the best candidate's
potential runs to the window's end (the query continues one stored
alternative through the window), and only 6% have every candidate tied.  The
paper's 31.1 of 59.3 says that on its data about half the candidate mass sits
in uses where the query leaves every alternative right after the routing
point, as a new alternative does.  Fitting that would need a model of where
real queries sit among alternatives, which the paper does not describe; the
profiles are calibrated to the span share and the before-filtering figure.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace

from prefixbench.errors import ConfigError

Range = tuple[int, int]


@dataclass(frozen=True)
class Profile:
    """Knobs common to all profiles; the subclasses below set their values."""

    name: str = "synthetic"
    summary: str = ""

    # -- size and reproducibility (the user-facing knobs) -------------------
    sessions: int = 100          # sessions generated; the size knob for benchmark runs
    seed: int = 0                # same seed -> identical token streams
    length_scale: float = 1.0    # multiplies every length below (longer contexts)
    vocab: int = 32_000          # token ids are uniform in [0, vocab)

    # -- turns: how long histories grow --------------------------------------
    turns: Range = (1, 1)                 # turns per session, uniform inclusive
    first_input_tokens: Range = (0, 0)    # the session's own first message (after shared prefixes)
    input_tokens: Range = (0, 0)          # new user / tool tokens of every later turn
    output_tokens: Range = (0, 0)         # model output tokens of every turn

    # -- cross-session sharing: where alternatives come from -----------------
    system_prompts: int = 0               # distinct shared system prompts (0: none)
    system_tokens: Range = (0, 0)         # length of each system prompt
    sessions_per_task: float = 1.0        # mean sessions sharing one task prompt (1: unshared)
    task_tokens: Range = (0, 0)           # task prompt after the system prompt (0: none)
    openers: int = 0                      # pool of conversation openings sessions may share
    opener_tokens: Range = (0, 0)         # length of each pooled opening
    opener_share: float = 0.0             # probability a session starts with a pooled opening
    opener_skew: float = 1.0              # Zipf exponent of opening popularity (0: uniform)

    # -- within-session branching --------------------------------------------
    fork_prob: float = 0.0                # probability a turn continues a random earlier turn
    fork_fanout: Range = (1, 1)           # turns that retry from the same earlier turn

    # -- growth: how sharing scales with the number of sessions ---------------
    # Sessions per sharing group (0: all sessions are one group).  Each group
    # draws from pools of its own - system_prompts, tasks, openers - so a
    # workload of k groups has k times the prompts, tasks and openings.
    group_sessions: int = 0
    # Leading tokens of every group's system prompts that all groups share
    # (the framework's common instructions; each group's wording follows).
    system_head_tokens: int = 0

    def validate(self) -> "Profile":
        """Raise :class:`ConfigError` naming the first knob out of range."""
        _check(self.sessions >= 1, "sessions", f"must be at least 1, got {self.sessions}")
        _check(0 <= self.seed < 2**63, "seed", f"must be in [0, 2**63), got {self.seed}")
        _check(math.isfinite(self.length_scale) and 0 < self.length_scale <= 1000,
               "length_scale", f"must be in (0, 1000], got {self.length_scale}")
        _check(2 <= self.vocab <= 2**32, "vocab", f"must be in [2, 2**32], got {self.vocab}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                lo, hi = value
                _check(0 <= lo <= hi, f.name, f"needs 0 <= lo <= hi, got {value}")
        _check(self.turns[0] >= 1, "turns", f"needs at least one turn, got {self.turns}")
        _check(self.fork_fanout[0] >= 1, "fork_fanout", f"needs at least 1, got {self.fork_fanout}")
        _check(self.system_prompts >= 0, "system_prompts", f"must be >= 0, got {self.system_prompts}")
        _check(self.openers >= 0, "openers", f"must be >= 0, got {self.openers}")
        _check(self.group_sessions >= 0, "group_sessions",
               f"must be >= 0, got {self.group_sessions}")
        _check(self.system_head_tokens >= 0, "system_head_tokens",
               f"must be >= 0, got {self.system_head_tokens}")
        _check(self.sessions_per_task >= 1, "sessions_per_task",
               f"must be >= 1, got {self.sessions_per_task}")
        for knob in ("opener_share", "fork_prob"):
            v = getattr(self, knob)
            _check(0.0 <= v <= 1.0, knob, f"must be a probability in [0, 1], got {v}")
        _check(self.opener_skew >= 0, "opener_skew", f"must be >= 0, got {self.opener_skew}")
        return self

    @property
    def groups(self) -> int:
        """Number of sharing groups; session ``i`` belongs to group ``i % groups``."""
        if self.group_sessions == 0:
            return 1
        return -(-self.sessions // self.group_sessions)

    @property
    def tasks(self) -> int:
        """Number of distinct task prompts of one group (its sessions are spread over them)."""
        return max(1, round(self.sessions / self.groups / self.sessions_per_task))


def _check(ok: bool, knob: str, what: str) -> None:
    if not ok:
        raise ConfigError(f"option {knob}: {what}")


@dataclass(frozen=True)
class CodeAct(Profile):
    """Code-writing agents: one long shared system prompt, a few trajectories per
    task, short turns and frequent retries - many alternatives early on."""

    name: str = "codeact"
    summary: str = "CodeAct-like agents: shared system prompt, shared tasks, many branches"
    sessions: int = 200
    turns: Range = (2, 9)
    # 790 tokens: blocks 0..48 are shared by every session and block 49 already
    # differs.  So routing point 48 of window 0 is one posting list holding
    # every session's first segment (Table 4's large CodeAct candidate sets),
    # and almost all of those stop matching in the very next block (Fig. 3).
    system_prompts: int = 1
    system_tokens: Range = (790, 790)
    # Several sampled trajectories per task share system + task prompt and
    # diverge at the first action: a second span with many alternatives.
    sessions_per_task: float = 4.0
    task_tokens: Range = (120, 480)
    input_tokens: Range = (20, 360)       # execution results / user feedback
    output_tokens: Range = (40, 360)      # thought + code action
    # Agents retry from an earlier state, often several times from one turn.
    fork_prob: float = 0.32
    fork_fanout: Range = (1, 5)


@dataclass(frozen=True)
class LMCacheAgent(Profile):
    """Long tool-using agent sessions: a shared tool-description prompt, then every
    turn appends a large tool output and a short action - one path per session."""

    name: str = "lmcache-agent"
    summary: str = "LMCache-Agent-like: long agent sessions, tool output appended every turn"
    sessions: int = 20
    turns: Range = (38, 72)
    # One tool-description prompt ending late in its window (block 187 of
    # 128..191, past routing point 176): the one place where sessions meet.
    system_prompts: int = 1
    system_tokens: Range = (3000, 3000)
    first_input_tokens: Range = (100, 600)   # the user's task
    input_tokens: Range = (200, 1500)        # tool output appended every turn
    output_tokens: Range = (30, 200)         # the agent's next call


@dataclass(frozen=True)
class EABF(Profile):
    """Long ShareGPT-style multi-turn chats: no system prompt, a rare pasted
    opening shared by a few chats - almost every span has one continuation."""

    name: str = "eabf"
    summary: str = "EABF-like: long multi-turn ShareGPT chats, few alternatives"
    sessions: int = 150
    turns: Range = (8, 48)
    first_input_tokens: Range = (10, 600)
    input_tokens: Range = (10, 600)
    output_tokens: Range = (100, 1000)
    # ~8% of chats open with one of 3 long pasted prompts that end inside
    # window 0 after routing point 48: the only multi-candidate entries.
    openers: int = 3
    opener_tokens: Range = (790, 1000)
    opener_share: float = 0.08
    opener_skew: float = 1.0


@dataclass(frozen=True)
class UltraChat(Profile):
    """Many short synthetic chats whose first user messages start with one of a
    few openings (one or two blocks), then diverge."""

    name: str = "ultrachat"
    summary: str = "UltraChat-like: many short chats with colliding openings"
    sessions: int = 2000
    turns: Range = (2, 6)
    first_input_tokens: Range = (20, 200)
    input_tokens: Range = (20, 200)
    output_tokens: Range = (140, 460)
    # Every chat starts with a pooled opening; a first query that matches only
    # the opening meets every earlier chat with it at routing point 0.
    openers: int = 40
    opener_tokens: Range = (16, 31)
    opener_share: float = 1.0
    opener_skew: float = 0.94


#: profile name -> dataclass (the workload names registered by ``synthetic``)
PROFILES: dict[str, type[Profile]] = {
    cls.name: cls for cls in (CodeAct, LMCacheAgent, EABF, UltraChat)
}


def make_profile(name: str, **overrides) -> Profile:
    """The named profile with knobs overridden (already parsed) and validated."""
    try:
        cls = PROFILES[name]
    except KeyError:
        raise ConfigError(f"unknown synthetic profile {name!r}; "
                          f"available: {', '.join(sorted(PROFILES))}") from None
    known = {f.name for f in fields(cls)} - {"name", "summary"}
    for key in overrides:
        if key not in known:
            raise ConfigError(f"option {key}: not a knob of profile {name} "
                              f"(knobs: {', '.join(sorted(known))})")
    return replace(cls(), **overrides).validate()


# -- the paper's sizes ----------------------------------------------------------

#: indexed blocks of each data set in the paper (section 6.1): its RocksDB
#: budgets of 5, 16, 29 and 362 MiB are 10% of ssd-blockhash's uncompressed
#: store at 24 bytes per indexed block
PAPER_BLOCKS: dict[str, int] = {
    name: mib * (1 << 20) * 10 // 24
    for name, mib in (("codeact", 5), ("lmcache-agent", 16), ("eabf", 29), ("ultrachat", 362))
}

#: unique blocks per session of each profile (block size 16, seed 0:
#: describe's unique blocks / sessions at the default size, ultrachat at
#: preset ``paper``); shared pieces are per group, so it holds at any size
BLOCKS_PER_SESSION: dict[str, float] = {
    "codeact": 17_226 / 200,
    "lmcache-agent": 50_296 / 20,
    "eabf": 137_820 / 150,
    "ultrachat": 914_949 / 10_600,
}

#: workload presets: ``small`` is the profile as defined above; ``paper``
#: gives the paper's size (unless ``sessions=`` says otherwise) with the
#: sharing grown in groups (:data:`PAPER_KNOBS`)
PRESETS = ("small", "paper")


#: knob overrides of preset ``paper`` (sessions aside; see the module docstring)
PAPER_KNOBS: dict[str, dict] = {
    # one group per default-sized set of sessions; the groups' system prompts
    # share a head and diverge at the start of a span that already has many
    # alternatives at the small size (block 48 of codeact, 176 of lmcache-agent)
    "codeact": {"group_sessions": 200, "system_head_tokens": 48 * 16},
    "lmcache-agent": {"group_sessions": 20, "system_head_tokens": 176 * 16},
    "eabf": {"group_sessions": 150},
    # a larger audience per opening: sarp's own Table 4 figure, not the proxy
    "ultrachat": {"group_sessions": 2650},
}


def paper_knobs(name: str) -> dict:
    """The knob overrides of preset ``paper`` for profile ``name``, sessions aside."""
    return dict(PAPER_KNOBS[name])


def paper_sessions(name: str, fraction=1.0) -> int:
    """Sessions that give about ``fraction * PAPER_BLOCKS[name]`` unique blocks."""
    f = _fraction(fraction)
    return max(1, round(f * PAPER_BLOCKS[name] / BLOCKS_PER_SESSION[name]))


def paper_workload_options(profile: str, fraction=1.0) -> dict:
    """Workload options for ``fraction`` of the paper's size of ``profile``.

    ``fraction`` is a number in (0, 1] or a string such as ``"0.125"`` or
    ``"1/8"``; the options give about ``fraction * PAPER_BLOCKS[profile]``
    unique blocks at block size 16 (blocks scale inversely with block size).
    """
    if profile not in PROFILES:
        raise ConfigError(f"unknown synthetic profile {profile!r}; "
                          f"available: {', '.join(sorted(PROFILES))}")
    return {"preset": "paper", "sessions": paper_sessions(profile, fraction)}


def _fraction(value) -> float:
    """``value`` as a fraction in (0, 1], or a :class:`ConfigError` naming it."""
    bad = ConfigError(f"option fraction: must be a number in (0, 1] such as 0.125 or 1/8, "
                      f"got {value!r}")
    if isinstance(value, bool):
        raise bad
    if isinstance(value, str):
        text = value.strip()
        try:
            if "/" in text:
                num, den = text.split("/", 1)
                f = float(num) / float(den)
            else:
                f = float(text)
        except (ValueError, ZeroDivisionError):
            raise bad from None
    elif isinstance(value, numbers.Real):
        f = float(value)
    else:
        raise bad
    if not (math.isfinite(f) and 0.0 < f <= 1.0):
        raise bad
    return f
