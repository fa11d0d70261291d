"""Griffe extension for the API pages: numpydoc's reStructuredText, rewritten as Markdown.

The docstrings of invimbed are numpydoc, written for Sphinx; mkdocstrings renders them as
Markdown. Before it parses them, this extension rewrites, in every docstring of the
loaded package (the private modules included: the public names are aliases of their
objects):

* ``.. math::`` blocks into ``$$ ... $$`` blocks and ``:math:`x``` into ``$x$``, which
  ``pymdownx.arithmatex`` (``generic: true``) hands to MathJax;
* the roles ``:class:``, ``:func:``, ``:meth:``, ``:attr:``, ``:data:``, ``:obj:``,
  ``:exc:``, ``:mod:`` and ``:const:`` (optionally ``:py:``-prefixed, with Sphinx's ``~``
  and ``title <target>`` forms), numpydoc's default role (single backticks around a
  dotted name) and the names of a "See Also" section into cross-references. A name
  is looked up as Python would from the docstring's object (its class, its module),
  then under the package; the object found is mapped to its public path (what
  ``invimbed/__init__.py`` or another public module exports it as):

  - a name that ``invimbed`` itself exports (listed on docs/api.md; the test suite holds
    that page to ``invimbed.__all__``), or a documented member of one, becomes
    ``[`X`][invimbed.X]``: a plain autorefs link, so ``mkdocs build --strict`` fails if
    it does not resolve;
  - another public object (``invimbed.nn.MLP``, say) becomes an *optional* autoref: a
    link if some page renders it, plain code if none does;
  - anything else (a private helper, another package) becomes plain code;
* double-backtick literals into Markdown code spans, and, on the ``name : type`` lines of the Parameters, Returns,
  Raises, ... sections, roles and backticks into plain text (mkdocstrings shows a type
  that is not a Python expression verbatim, inside ``<code>``).

Code is left alone: fenced blocks and doctest (``>>>``) blocks.

Enabled in mkdocs.yml (``plugins: mkdocstrings: handlers: python: options: extensions``).
Nothing here imports invimbed: it works on Griffe's static tree, so it does not care
which private module an object lives in.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

__all__ = ["RstDocstrings", "rst_to_markdown"]

_ROLES = "class|func|meth|attr|data|obj|exc|mod|const"
# :role:`text`, ``literal``, `default role`; leftmost first, so ``x`` is not read as `x`
_INLINE = re.compile(
    r":math:`(?P<math>[^`]+)`"
    rf"|:(?:py:)?(?P<role>{_ROLES}):`(?P<target>[^`]+)`"
    r"|``(?P<literal>[^`]+?)``"
    r"|(?<![`\w])`(?P<default>[^`\s][^`]*?)`(?![`\w])"
)
_DOTTED = re.compile(r"~?\.?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?")
_TITLED = re.compile(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>", re.DOTALL)
_MATH = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*(?P<rest>.*)$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_UNDERLINE = re.compile(r"^[ \t]*-{3,}[ \t]*$")
# numpydoc sections whose unindented lines are "name : type" (or "type") headers
_ITEM_SECTIONS = {
    "parameters", "other parameters", "params", "arguments", "args", "returns", "yields",
    "receives", "raises", "warns", "attributes", "methods", "functions", "classes",
    "modules",
}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


class _Resolver:
    """Cross-references for one package: a name in a docstring -> Markdown."""

    def __init__(self, pkg: griffe.Module) -> None:
        self.pkg = pkg
        # canonical path of an exported object -> (public path, exported by the package root)
        self.public: dict[str, tuple[str, bool]] = {}
        self._collect(pkg)

    @staticmethod
    def _is_public_path(path: str) -> bool:
        return not any(part.startswith("_") for part in path.split("."))

    def _collect(self, mod: griffe.Module) -> None:
        exports = getattr(mod, "exports", None)
        names = [n if isinstance(n, str) else getattr(n, "name", str(n)) for n in exports or ()]
        if not names:
            names = [n for n in mod.members if not n.startswith("_")]
        for name in names:
            if name.startswith("_") or name not in mod.members:
                continue
            member = mod.members[name]
            try:
                target = member.final_target if member.is_alias else member
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue
            # an object already exported by a module nearer the root keeps that path
            self.public.setdefault(target.path, (f"{mod.path}.{name}", mod is self.pkg))
        for sub in mod.modules.values():
            if not sub.is_alias and not sub.name.startswith("_"):
                self._collect(sub)

    def _lookup(self, name: str, scope: griffe.Object) -> griffe.Object | None:
        """The object that ``name`` means in the docstring of ``scope``, or None."""
        candidates: list[tuple[griffe.Object, str]] = []
        root = self.pkg.name
        if name == root:
            return self.pkg
        if name.startswith(root + "."):
            candidates.append((self.pkg, name[len(root) + 1:]))
        else:
            obj: griffe.Object | None = scope
            while obj is not None:  # the object, its class, its module, its package...
                candidates.append((obj, name))
                obj = obj.parent
        for base, rel in candidates:
            try:
                found = base[rel]
                return found.final_target if found.is_alias else found
            except (KeyError, ValueError, IndexError, AttributeError, TypeError,
                    griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue
        return None

    def resolve(self, name: str, scope: griffe.Object) -> tuple[str, bool] | None:
        """(public path, strict) for ``name`` seen from ``scope``; None if not public.

        ``strict`` when the page renders the object for certain: something the package
        root exports (docs/api.md lists each), or a documented member of one.
        """
        obj = self._lookup(name, scope)
        if obj is None:
            return None
        path = obj.path
        # the longest exported prefix of the canonical path
        prefix = path
        while prefix and prefix not in self.public:
            prefix = prefix.rpartition(".")[0]
        if prefix:
            public, from_root = self.public[prefix]
            rest = path[len(prefix):]
            public += rest
            if not self._is_public_path(public):
                return None
            strict = from_root and (not rest or (
                rest.count(".") == 1 and obj.parent is not None and obj.parent.path == prefix
                and obj.docstring is not None and not obj.is_module))
            return public, strict
        if self._is_public_path(path):
            return path, False
        return None


def _display(target: str) -> tuple[str, str]:
    """(text to show, name to look up) of a Sphinx role's content."""
    m = _TITLED.fullmatch(target.strip())
    if m and m["title"]:
        return m["title"], m["target"].strip().lstrip("~")
    target = target.strip()
    if target.startswith("~"):
        name = target[1:].lstrip(".")
        return name.rpartition(".")[2], name
    return target.lstrip("."), target.lstrip(".")


def _code(text: str) -> str:
    text = text.strip()
    if "`" in text:
        return f"`` {text} ``"
    return f"`{text}`"


class _Converter:
    def __init__(self, resolver: _Resolver | None, scope: griffe.Object | None) -> None:
        self.resolver = resolver
        self.scope = scope

    def ref(self, shown: str, name: str) -> str:
        """Markdown for a reference to ``name`` shown as ``shown``."""
        bare = name.removesuffix("()")
        res = None
        if self.resolver is not None and self.scope is not None and _DOTTED.fullmatch(bare):
            res = self.resolver.resolve(bare, self.scope)
        if res is None:
            return _code(shown)
        path, strict = res
        if strict:
            return f"[{_code(shown)}][{path}]"
        return f'<autoref identifier="{path}" optional>{_code(shown)}</autoref>'

    def inline(self, text: str) -> str:
        def sub(m: re.Match) -> str:
            if m["math"] is not None:
                return f"${m['math'].strip()}$"
            if m["role"] is not None:
                return self.ref(*_display(m["target"]))
            if m["literal"] is not None:
                return _code(m["literal"])
            default = m["default"]
            # numpydoc's default role is a cross-reference; other `text` stays code
            before, after = text[:m.start()], text[m.end():]
            # (not the title of a Markdown link or an autoref: that is one already)
            if (_DOTTED.fullmatch(default.strip()) and not before.endswith(("[", ">"))
                    and not after.startswith(("]", "<"))):
                return self.ref(*_display(default))
            return m[0]
        return _INLINE.sub(sub, text)

    def plain(self, text: str) -> str:
        """A type line: the text of roles and literals, without markup."""
        def sub(m: re.Match) -> str:
            if m["math"] is not None:
                return m["math"]
            if m["role"] is not None:
                return _display(m["target"])[0]
            return m["literal"] if m["literal"] is not None else m["default"]
        return _INLINE.sub(sub, text)

    def see_also(self, line: str) -> str:
        """``name, name`` or ``name : description`` -> a list item with references."""
        indent = line[:_indent(line)]
        names, sep, desc = line.strip().partition(" : ")
        if not sep and names.endswith(" :"):
            names = names[:-2]
        refs = []
        for name in names.split(","):
            name = name.strip()
            m = _INLINE.fullmatch(name)
            if m and m["role"] is not None:
                refs.append(self.ref(*_display(m["target"])))
            elif m and m["default"] is not None:
                refs.append(self.ref(*_display(m["default"])))
            elif name:
                refs.append(self.ref(name, name) if _DOTTED.fullmatch(name) else self.inline(name))
        item = f"{indent}- {', '.join(refs)}"
        return f"{item}: {self.inline(desc)}" if sep else item


def _math_block(lines: list[str], i: int) -> tuple[list[str], int]:
    """The ``.. math::`` directive at ``lines[i]`` as ``$$`` blocks; the next line index."""
    m = _MATH.match(lines[i])
    assert m is not None
    indent = m["indent"]
    body = [m["rest"]] if m["rest"].strip() else []
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > len(indent)):
        body.append(lines[j])
        j += 1
    while j > i + 1 and not lines[j - 1].strip():  # trailing blank lines are not the body's
        j -= 1
        body.pop()
    text = textwrap.dedent("\n".join(body)).strip("\n")
    # directive options (":label: x", ":nowrap:") are not part of the equations
    kept = [ln for ln in text.split("\n") if not re.match(r"^:\w+:", ln)]
    out: list[str] = []
    # Sphinx: equations separated by blank lines are separate displays
    for eq in re.split(r"\n[ \t]*\n", "\n".join(kept).strip("\n")):
        if eq.strip():
            out += ["", f"{indent}$$", *(f"{indent}{ln}" for ln in eq.split("\n")), f"{indent}$$"]
    return [*out, ""], j


def rst_to_markdown(text: str, resolver: _Resolver | None = None,
                    scope: griffe.Object | None = None) -> str:
    """A numpydoc docstring's text with its reStructuredText rewritten as Markdown."""
    conv = _Converter(resolver, scope)
    lines = text.split("\n")
    out: list[str] = []
    section, base = "", 0
    para: list[str] = []  # consecutive prose lines, converted together (roles may wrap)

    def flush() -> None:
        if para:
            out.extend(conv.inline("\n".join(para)).split("\n"))
            para.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if _FENCE.match(line):  # a fenced block, verbatim to its closing fence
            flush()
            fence = line.strip()[:3]
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                j += 1
            out += lines[i:j + 1]
            i = j + 1
            continue
        if line.lstrip().startswith(">>>"):  # a doctest block, verbatim to a blank line
            flush()
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            continue
        if _MATH.match(line):
            flush()
            block, i = _math_block(lines, i)
            out += block
            continue
        if line.strip() and _UNDERLINE.match(nxt) and not _UNDERLINE.match(line):
            flush()  # a section header
            section, base = line.strip().lower(), _indent(line)
            out += [line, nxt]
            i += 2
            continue
        if line.strip() and _indent(line) == base and section in _ITEM_SECTIONS:
            flush()
            out.append(conv.plain(line))
        elif line.strip() and _indent(line) == base and section == "see also":
            flush()
            out.append(conv.see_also(line))
        elif line.strip():
            para.append(line)
        else:
            flush()
            out.append(line)
        i += 1
    flush()
    return "\n".join(out)


class RstDocstrings(griffe.Extension):
    """Rewrites the docstrings of a loaded package; see the module docstring."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        resolver = _Resolver(pkg)
        seen: set[int] = set()

        def walk(obj: griffe.Object) -> None:
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = rst_to_markdown(obj.docstring.value, resolver, obj)
            for member in obj.members.values():
                if not member.is_alias:
                    walk(member)

        walk(pkg)
