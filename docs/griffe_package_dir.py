"""A griffe extension for the API reference (``mkdocs.yml``): the subpackages that setuptools
installs from other folders.

pyproject.toml installs ``envs/`` as ``torchrl_warp.envs``, ``cuda/`` as ``torchrl_warp.cuda``
and ``recipes/`` as ``torchrl_warp.recipes`` (``[tool.setuptools.package-dir]``). griffe, which
reads the source without importing it, looks for a subpackage inside its parent's folder and
finds none of them. Once griffe has read ``torchrl_warp`` from the checkout, this extension
reads each mapped folder (paths relative to the repository root) and attaches it under its
installed name, so ``::: torchrl_warp.envs.TagEnv`` works from a plain checkout as well as
from an editable install, and nothing is imported.

It also renders what the docstrings write for Sphinx and doctest as those would: a role
(``:class:`~torchrl_warp.layout.Layout```) as a code span (``Layout``), a paragraph that ends
in ``::`` (an indented code block follows) with one colon, and a doctest outside an
``Examples:`` section (which the Google-style parser renders itself) as a code block, not
as Markdown's nested quotes.
"""
import re
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parent.parent

# :class:`~a.b.C` -> `C`; :meth:`set_reset_pool` -> `set_reset_pool`; :data:`X` -> `X`
_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|data|attr|obj|exc|const):`(~?)([^`]+)`")
_LITERAL = re.compile(r"(?<=\S)::$", re.MULTILINE)


_EXAMPLES = re.compile(r"Examples:\s*$")  # "Example:" is an admonition


def _fence_doctests(text: str) -> str:
    """Each run of doctest lines (``>>>`` to the next blank or less indented line) outside an
    ``Examples:`` section as a fenced ``pycon`` block."""
    out, in_examples, fence = [], False, None
    for line in text.split("\n"):
        stripped = line.lstrip()
        indent = line[:len(line) - len(stripped)]
        if fence is not None and (not stripped or len(indent) < len(fence)):
            out.append(fence + "```")
            fence = None
        if not indent and stripped:
            in_examples = bool(_EXAMPLES.match(stripped))
        if fence is None and stripped.startswith(">>>") and not in_examples:
            fence = indent
            out.append(fence + "```pycon")
        out.append(line)
    if fence is not None:
        out.append(fence + "```")
    return "\n".join(out)


def _role_as_code(match: re.Match) -> str:
    target = match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


def _objects(obj: griffe.Object):
    """``obj`` and everything defined in it (not what it imports)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class PackageDir(griffe.Extension):
    """Attach ``package_dir``'s folders (installed name -> folder) to their parent packages."""

    def __init__(self, package_dir: dict[str, str]):
        self.package_dir = dict(package_dir)
        self._seen: set[int] = set()  # docstrings rewritten already (a package is walked once more when attached)

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        for name, folder in self.package_dir.items():
            parent, _, sub = name.rpartition(".")
            if parent != pkg.name or sub in pkg.members:
                continue
            module = loader.load(ROOT / folder, try_relative_path=True)  # read as a top-level `folder`
            loader.modules_collection.del_member(module.name)
            module.name = sub
            pkg.set_member(sub, module)
        for obj in _objects(pkg):
            if obj.docstring is not None and id(obj.docstring) not in self._seen:
                self._seen.add(id(obj.docstring))
                text = _LITERAL.sub(":", _ROLE.sub(_role_as_code, obj.docstring.value))
                obj.docstring.value = _fence_doctests(text)

    #: griffe 1's name of the event (griffe 2: ``on_package``)
    on_package_loaded = on_package
