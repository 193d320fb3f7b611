"""The docs and comments describe the product, and every repo path they cite exists.

1. No lab-notebook words: "session", "run 32", "runs 43-47", "attempt 2", "then we
   tried", ordinals of sessions, scratch scripts. TorchRL's and Python's "run" (a verb, or
   "runs 10 + 100 agents") is fine; a run *number* cited as a source is not.
2. Every path the docs cite (backticked, linked, or a bare `docs/...`, `tests/...`,
   `cuda/...` path in the text) exists, and every link to a heading of a doc names a
   heading that exists.

Both checks are also run on made-up snippets (`test_*_would_fail`), so that a regex too
loose to catch anything shows up as a failure here.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# docs/*.md (the guide) and docs/api/*.md (the API reference's pages)
DOCS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
CODE = sorted(p for d in ("torchrl_warp", "envs", "cuda", "recipes", "docs")
              for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)

# --------------------------------------------------------------------------- diary words

_DIARY = [
    # "session", "sessions", "Fifth session", "this session's"
    (r"\bsessions?\b", "session"),
    # "run 32", "runs 43-47", "Run 3's profile", "(run 41, docs/...)", "run 5 of 2026-11-30",
    # "run 2 -> run 3"; not "runs 10 + 100 agents", "run 50 steps", "runs 8-10% faster",
    # "runs 1.5x faster"
    (r"\bruns? \d+(?:\s*[-–]\s*\d+)?"
     r"(?=[,;:)\]'’]|\.(?!\d)|\s+(?:of\s+20\d\d|->|and\s+\d|on\s+(?:a|an|one|the|another)\b)|\s*$)",
     "a run number"),
    (r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|previous|next)"
     r"\s+attempts?\b", "an attempt"),
    (r"\battempts?\s+(?:\d+|#\d+)\b", "an attempt number"),
    (r"\b(?:then|so|next|first|later)\s+we\s+(?:tried|attempted|measured|ran)\b", "chronology"),
    (r"\bwe\s+(?:then\s+)?tried\b", "chronology"),
    (r"\bscratch`?[- ]style\b|\bscratch\s+`[\w/.-]+\.py`|\bscratch scripts?\b", "a scratch script"),
    (r"\bdevice time ran out\b|\bwas spent\)", "the tracker's budget"),
]
DIARY = [(re.compile(p, re.IGNORECASE | re.MULTILINE), why) for p, why in _DIARY]


def diary_words(text):
    """(line number, what, the line) for each diary word in text."""
    found = []
    for pattern, why in DIARY:
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append((line, why, m.group(0)))
    return sorted(found)


@pytest.mark.parametrize("path", DOCS + CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_diary_words(path):
    found = diary_words(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)}: " + "; ".join(
        f"line {n}: {why} ({text!r})" for n, why, text in found)


@pytest.mark.parametrize("text", [
    "## Fifth session (2026-11-30): the scan search",
    "measured (run 5 of 2026-11-30, commit 6deb47d)",
    "22.6-23.0M (0.435-0.442 ms, runs 43-47, main's kernels unchanged)",
    "Run 3's profile is GPU-bound",
    "#: run 41, docs/benchmarks.md)",
    "0.617 -> 0.594 ms per step, run 32): a block's",
    "(scratch `cmp43.py`, 100 steps x 3)",
    "(`scratch`-style A/B scripts calling bench.measure)",
    "What moved it (run 2 -> run 3): the action distribution",
    "not bisected (the session's device time ran out).",
    "on run 26's machine",
    "Then we tried a scan.",
])
def test_diary_words_would_fail(text):
    assert diary_words(text), text


@pytest.mark.parametrize("text", [
    "(O(agents + obstacles) per agent; the benchmark runs 10 + 100).",
    "Tag's grid runs 8-10% faster at 1000 agents per env",
    "the scan runs 1.5x faster",
    "a `Collector` runs the policy; `python -m pytest` runs everything on the CPU backend",
    "run 50 steps, then 3 timed runs of 50 steps; 8 runs at a time on one H200",
    "TorchRL's rollouts run the env; a run killed while saving leaves the checkpoint whole",
    "`scratch_row` (per-agent working memory); `Field(scratch=True)`",
    "and the kernels' scratch ``runner_next``, ``nearest_key``",
    "the recipe logs `time/collect_s`; the first call compiles the kernels",
    "`--repeats 3` (the median of 3 runs)",
])
def test_diary_words_pass_legitimate_text(text):
    assert not diary_words(text), diary_words(text)


# --------------------------------------------------------------------------- cited paths

_TOP = r"(?:docs|tests|torchrl_warp|envs|cuda|recipes)"
_EXT = r"(?:py|md|yaml|png|toml)"
# a backticked token that is a file name or path: `cuda/tag.py`, `ppo.yaml`, `env/tag.yaml`
_BACKTICKED = re.compile(r"`([\w./-]+\.%s)`" % _EXT)
# a bare path in the text: docs/recipes.md, tests/test_core.py, torchrl_warp/recipes/train.py
_BARE = re.compile(r"(?<![\w./-])(%s/[\w./-]*\w\.%s)\b" % (_TOP, _EXT))
# a markdown link to something that is not a web page: [text](../x.md#anchor), ![img](img/a.png)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _candidates(doc, path):
    """Where a cited path may live: the repo root, beside the doc, or under recipes/conf
    (the Hydra config groups: `env/tag.yaml`, `algo/ppo.yaml`)."""
    base = doc.parent if doc.suffix == ".md" else ROOT
    return [ROOT / path, base / path, ROOT / "recipes" / "conf" / path,
            ROOT / "recipes" / "conf" / "algo" / path, ROOT / "recipes" / "conf" / "env" / path]


_BASENAMES = None


def _basenames():
    global _BASENAMES
    if _BASENAMES is None:
        _BASENAMES = {p.name for p in ROOT.rglob("*")
                      if ".git" not in p.parts and "__pycache__" not in p.parts}
    return _BASENAMES


def _slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.MULTILINE)}


def missing_paths(doc, text):
    """Cited paths of text (as found in doc) that do not exist."""
    missing = []
    for m in _BACKTICKED.finditer(text):
        path = m.group(1)
        if "/" in path:
            if not any(c.exists() for c in _candidates(doc, path)):
                missing.append(path)
        elif not path.endswith(".png") and path not in _basenames():  # .png: the recipe's outputs
            missing.append(path)
    for m in _BARE.finditer(text):
        if not any(c.exists() for c in _candidates(doc, m.group(1))):
            missing.append(m.group(1))
    if doc.suffix == ".md":
        for m in _LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                missing.append(target)
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                missing.append(target)
    return sorted(set(missing))


def _without_code_blocks(text):
    return re.sub(r"```.*?```", "", text, flags=re.DOTALL)


@pytest.mark.parametrize("path", DOCS + CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_paths_exist(path):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        text = _without_code_blocks(text)
    missing = missing_paths(path, text)
    assert not missing, f"{path.relative_to(ROOT)} cites paths that do not exist: {missing}"


@pytest.mark.parametrize("text", [
    "One Hydra app, `torchrl_warp/recipes/train.py` (installed as ...)",
    "layout in `torchrl_warp/cuda/tag.py`",
    "(scratch `cmp43.py`, 100 steps x 3)",
    "offline ptxas sm_90, `scratch/sass.py`",
    "see [the goals](benchmarks.md#no-such-heading)",
    "see [recipes](recipes_old.md)",
    "see [below](#no-such-heading)",
    "the numbers are in docs/benchmark.md",
])
def test_missing_paths_would_fail(text):
    assert missing_paths(ROOT / "docs" / "benchmarks.md", text), text


def test_existing_paths_pass():
    text = ("`recipes/train.py`, `cuda/tag.py`, `envs/tag.py`, `torchrl_warp/scratch.py`, "
            "`scratch.py`, `env/tag.yaml`, `ppo.yaml`, docs/recipes.md, tests/test_core.py, "
            "[how it works](how_it_works.md), [README](../README.md), "
            "![curve](img/cartpole_ppo_h200.png), [outputs](how_it_works.md#outputs-handed-out-never-written-again)")
    assert missing_paths(ROOT / "docs" / "benchmarks.md", text) == []
