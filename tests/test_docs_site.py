"""The docs site (``mkdocs.yml``) builds with ``mkdocs build --strict``, and what it built holds
the guide and an API reference with the docstrings in it.

A strict build fails on any warning: a link that leaves docs/, a broken anchor, a docstring
cross-reference or parameter griffe cannot place. The content checks read the docstrings
from the source (with ``ast``, importing nothing) and look for them in the built pages, so an
API page on which mkdocstrings rendered nothing, or an env class left out of it, fails here;
``test_content_check_would_fail`` runs the same checks on pages with the docstrings removed.
"""
import ast
import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ["environments", "recipes", "writing_an_env", "how_it_works", "reliability", "benchmarks"]
#: the API pages (docs/api/<name>.md) and the modules whose public objects they document
API_PAGES = ["core", "checks", "kernel_helpers", "envs", "recipes"]


def _mkdocs(*args, cwd=ROOT):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # mkdocs-material's banner, not a warning of ours
    try:
        import mkdocstrings_handlers.python  # noqa: F401
    except ImportError:
        pytest.fail('mkdocs, mkdocs-material and mkdocstrings[python] come with pip install -e ".[test]"')
    return subprocess.run([sys.executable, "-m", "mkdocs", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs") / "site"
    result = _mkdocs("build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out))
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    assert "WARNING" not in log, log
    return out


# --------------------------------------------------------------------------- reading pages

def _text(fragment: str) -> str:
    """The words of an HTML fragment, whitespace collapsed."""
    fragment = re.sub(r"<(script|style)\b.*?</\1>", " ", fragment, flags=re.DOTALL)
    fragment = re.sub(r"</?(?:code|span|a|em|strong|kbd)\b[^>]*>", "", fragment)  # inline: no space
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _rendered(docstring_text: str) -> str:
    """A docstring's text as the page shows it: roles as their target (``:class:`~a.B``` ->
    ``B``), code spans without their backticks, whitespace collapsed."""
    text = re.sub(r":\w+:`(~?)([^`]+)`", lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2),
                  docstring_text)
    return " ".join(text.replace("`", "").split())


def _sections(page_html: str) -> dict[str, str]:
    """Object path -> the text of its part of an API page (from its anchor to the next anchor
    that is not one of its members)."""
    anchors = [(m.start(), m.group(1)) for m in re.finditer(r'id="(torchrl_warp[\w.]*)"', page_html)]
    sections = {}
    for i, (start, path) in enumerate(anchors):
        end = next((s for s, p in anchors[i + 1:] if not p.startswith(path + ".")), len(page_html))
        sections[path] = _text(page_html[start:end])
    return sections


# --------------------------------------------------------------------------- what the source says

def _module_file(module: str) -> Path:
    """The source file of a torchrl_warp module (envs/, cuda/, recipes/ install under it)."""
    parts = module.split(".")
    folder = {"envs": "envs", "cuda": "cuda", "recipes": "recipes"}.get(parts[1], "torchrl_warp") \
        if len(parts) > 1 else "torchrl_warp"
    rest = parts[2:] if folder != "torchrl_warp" else parts[1:]
    path = ROOT / folder / Path(*rest) if rest else ROOT / folder
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _definition(module: str, name: str) -> ast.ClassDef | ast.FunctionDef:
    tree = ast.parse(_module_file(module).read_text(encoding="utf-8"))
    return next(d for d in tree.body if isinstance(d, (ast.ClassDef, ast.FunctionDef)) and d.name == name)


def _signature_names(definition) -> list[str]:
    """The parameters the page shows in the object's signature (a class: its ``__init__``'s;
    ``None`` when it inherits its ``__init__``)."""
    if isinstance(definition, ast.ClassDef):
        definition = next((d for d in definition.body if isinstance(d, ast.FunctionDef) and d.name == "__init__"),
                          None)
        if definition is None:
            return None
    a = definition.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [p.arg for p in (a.vararg, a.kwarg) if p]
    return [n for n in names if n not in ("self", "cls")]


def expected_objects() -> dict[str, tuple[str, str, list[str] | None]]:
    """Object path (its anchor) -> (its API page, its docstring's first line as rendered, its
    signature's parameters): the package's exports, every env, the recipe's entry points."""
    expected = {}

    def add(page, module, name, anchor=None):
        definition = _definition(module, name)
        first_line = _rendered(ast.get_docstring(definition).split("\n")[0])
        expected[anchor or f"{module}.{name}"] = (page, first_line, _signature_names(definition))

    init = ast.parse((ROOT / "torchrl_warp" / "__init__.py").read_text(encoding="utf-8"))
    exports = next(ast.literal_eval(n.value) for n in init.body
                   if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "_EXPORTS")
    for name, module in exports.items():
        add("core", f"torchrl_warp.{module}", name)
    add("checks", "torchrl_warp.check_env", "check_env")
    envs = ast.parse((ROOT / "envs" / "__init__.py").read_text(encoding="utf-8"))
    for node in envs.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                add("envs", node.module, alias.name, anchor=f"torchrl_warp.envs.{alias.name}")
    for name in ("train", "main", "family"):
        add("recipes", "torchrl_warp.recipes.train", name)
    for name in ("start_run", "finish_run", "make_env"):
        add("recipes", "torchrl_warp.recipes.common", name)
    add("recipes", "torchrl_warp.recipes.on_policy", "train")
    add("recipes", "torchrl_warp.recipes.config", "check_config")
    add("recipes", "torchrl_warp.recipes.scripted", "scripted_tags_per_episode")
    return expected


def missing_content(site_dir: Path) -> list[str]:
    """What the built site lacks: a guide page or its title, an API object, its docstring,
    its signature's parameters."""
    missing = []
    for name in GUIDE:
        page = site_dir / name / "index.html"
        title = (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
        if not page.exists():
            missing.append(f"guide page {name}")
        elif _rendered(title) not in _text(page.read_text(encoding="utf-8")):
            missing.append(f"{name}: its title {title!r}")
    sections = {}
    for name in API_PAGES:
        page = site_dir / "api" / name / "index.html"
        sections[name] = _sections(page.read_text(encoding="utf-8")) if page.exists() else {}
    for path, (page, first_line, parameters) in expected_objects().items():
        text = sections[page].get(path)
        if text is None:
            missing.append(f"api/{page}: {path}")
            continue
        if first_line not in text:
            missing.append(f"api/{page}: {path}'s docstring ({first_line!r})")
        for parameter in parameters or ():
            if parameter not in text:
                missing.append(f"api/{page}: {path}'s parameter {parameter!r}")
    return missing


# --------------------------------------------------------------------------- the tests

def test_site_has_the_guide_and_the_docstrings(site):
    assert missing_content(site) == []
    # the objects the checks above look for
    assert {"torchrl_warp.env.WarpEnv", "torchrl_warp.envs.TagEnv", "torchrl_warp.envs.MPEEnv",
            "torchrl_warp.check_env.check_env", "torchrl_warp.recipes.train.train"} <= set(expected_objects())


def test_api_pages_render_docstring_sections(site):
    core = (site / "api" / "core" / "index.html").read_text(encoding="utf-8")
    warp_env = _sections(core)["torchrl_warp.env.WarpEnv"]
    # Google-style "Args:" rendered as a parameter table, with the signature's defaults
    assert "Parameters:" in warp_env and "number of environments stepped together" in warp_env
    # an "Examples:" doctest rendered as highlighted console code, not as quoted text
    assert '<span class="gp">&gt;&gt;&gt; </span>' in core and "<blockquote" not in core
    # Sphinx roles shown as code, not as their raw text
    for page in API_PAGES:
        text = _text((site / "api" / page / "index.html").read_text(encoding="utf-8"))
        assert not re.search(r":(class|func|meth|mod|data):", text), page
    envs = _sections((site / "api" / "envs" / "index.html").read_text(encoding="utf-8"))
    assert "starting_location_x" in envs["torchrl_warp.envs.TagEnv"]
    assert "num_envs" in envs["torchrl_warp.envs.CartPoleEnv"]  # WarpEnv's signature, inherited


def test_content_check_would_fail(site, tmp_path):
    """The same checks on a copy of the site whose API pages lost their docstrings (as when
    mkdocstrings renders nothing) and whose guide lacks a page."""
    bare = tmp_path / "site"
    shutil.copytree(site, bare)
    for name in API_PAGES:
        page = bare / "api" / name / "index.html"
        page_html = page.read_text(encoding="utf-8")
        page.write_text(re.sub(r'<div class="doc doc-contents.*', "", page_html, flags=re.DOTALL), encoding="utf-8")
    shutil.rmtree(bare / "reliability")
    missing = missing_content(bare)
    assert "guide page reliability" in missing
    for path, (page, _, _) in expected_objects().items():
        assert any(m.startswith(f"api/{page}: {path}") for m in missing), path


def test_strict_build_fails_on_a_broken_link(tmp_path):
    """The site's validation settings make a broken anchor and a link out of docs/ fail."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[a heading](#no-such-heading), [the readme](../README.md)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\nnav:\n  - Home: index.md\n")
    result = _mkdocs("build", "--strict", "-f", str(config), "-d", str(tmp_path / "site"), cwd=tmp_path)
    log = result.stdout + result.stderr
    assert result.returncode != 0, log
    assert "no-such-heading" in log and "README.md" in log, log
