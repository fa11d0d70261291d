"""numba code generated from the symbolic provider's expressions, cached on disk.

One module of Python source per request of `SympyProvider`, holding

* ``point(t, z (N,), th (M,), out)``: the cse'd expressions at one sample, written into
  ``out[j]`` (``out`` has one more slot than there are values: the zero that entries
  known to vanish are gathered from);
* ``kernel(t, z (B, N), th (B, M), out (B, n + 1))``: ``point``'s lines row by row,
  what ``compile="numba"`` calls for a batch; ``kernel_rows`` the same with a time per
  row (``t`` of shape (B,));
* for a per-sample derivative (`SympyProvider.sample_function`, what ``backend="numba"``
  calls), instead of the loops one function ``sample(t, z, th)`` (``sample_T(z)`` for
  the terminal loss) computing the same expressions and returning the full tensor, and
  the map ``GATHER`` from the tensor's entries to ``point``'s values (what the CUDA
  kernel reads). numba compiles a function when it is first called, so each process compiles
  only what it runs.

The source is written to ``$INVIMBED_CACHE`` (default ``~/.cache/invimbed/codegen``)
under the name of its SHA-256 and imported from there, so numba's ``cache=True`` keeps
the machine code next to it: a later process compiles nothing. The file is only
imported when its content is the source just generated. Where the folder cannot be
written the same source is compiled in memory (``cache=False``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

HEADER = ("import math\nimport numpy as np\nfrom numba import njit\n\n"
          "_jit = njit(cache={cache}{options})\n")


def cache_dir() -> Path | None:
    """The folder of generated modules (created if missing), or None if it cannot be."""
    root = os.environ.get("INVIMBED_CACHE")
    path = Path(root) / "codegen" if root else Path.home() / ".cache" / "invimbed" / "codegen"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return path if os.access(path, os.W_OK) else None


def printer() -> Any:
    """sympy's plain-Python printer, as the generated code is printed (``math.sin``)."""
    from sympy.printing.pycode import PythonCodePrinter

    return PythonCodePrinter({"fully_qualified_modules": True, "strict": True})


def printed(t_arg: Any, z_args: tuple, th_args: tuple, repl: list, exprs: list,
            args: tuple[str, str, str] = ("t", "z", "th"),
            pad: str = "    ") -> tuple[list[str], list[str]]:
    """The cse'd expressions ``exprs`` (after the replacements ``repl``) printed once: the
    lines reading the arguments ``args`` (time, state, control) of a generated function,
    whose symbols are ``t_arg``, ``z_args``, ``th_args``, and computing ``repl``; and the
    text of each expression."""
    p = printer()
    t, z, th = args
    head = [f"{pad}{t_arg} = {t}"]
    head += [f"{pad}{s} = {z}[{i}]" for i, s in enumerate(z_args)]
    head += [f"{pad}{s} = {th}[{k}]" for k, s in enumerate(th_args)]
    head += [f"{pad}{s} = {p.doprint(e)}" for s, e in repl]
    return head, [p.doprint(e) for e in exprs]


def assignment_lines(t_arg: Any, z_args: tuple, th_args: tuple, repl: list,
                     targets: list[tuple[str, Any]], args: tuple[str, str, str] = ("t", "z", "th"),
                     pad: str = "    ") -> list[str]:
    """Lines computing the cse'd expressions ``targets`` (``(name, expression)``; see
    `printed`)."""
    head, values = printed(t_arg, z_args, th_args, repl, [e for _, e in targets], args, pad)
    return head + [f"{pad}{name} = {v}" for (name, _), v in zip(targets, values)]


def point_source(t_arg: Any, z_args: tuple, th_args: tuple, repl: list,
                 reduced: list, text: tuple[list[str], list[str]] | None = None,
                 loops: bool = True) -> list[str]:
    """Lines of ``point`` and (with ``loops``) ``kernel`` and ``kernel_rows`` for the
    cse'd ``repl`` / ``reduced`` (``text``: their `printed` form, where the caller has
    it)."""
    head, values = text or printed(t_arg, z_args, th_args, repl, reduced)
    body = head + [f"    out[{j}] = {v}" for j, v in enumerate(values)]
    lines = ["@_jit", "def point(t, z, th, out):"] + body
    if not loops:
        return lines
    # the loops hold point's lines themselves: numba compiles a callee as a function of
    # its own, and LLVM then optimises its code once more inlined into the caller
    row = ["        z = Z[_b]", "        th = TH[_b]", "        out = OUT[_b]"]
    row += ["    " + line for line in body]
    lines += ["", "", "@_jit", "def kernel(t, Z, TH, OUT):", "    for _b in range(Z.shape[0]):"]
    lines += row
    lines += ["", "", "@_jit", "def kernel_rows(T, Z, TH, OUT):",
              "    for _b in range(Z.shape[0]):", "        t = T[_b]"]
    lines += row
    return lines


def sample_source(text: tuple[list[str], list[str]], reduced: list, gather: np.ndarray,
                  shape: tuple[int, ...], n_theta: int, terminal: bool) -> list[str]:
    """Lines of the one function of a per-sample request: ``sample(t, z, th)`` (or
    ``sample_T(z)`` for the terminal loss, at ``t = 0`` without control) computing the
    cse'd ``reduced`` (``text``: their `printed` form, shared with ``point``) and writing
    the full tensor of ``shape`` entry by entry (``gather[k]``: the value of flat entry
    ``k``, ``len(reduced)`` for a zero).

    One function, not ``sample`` over ``point``: numba compiles each function of a module
    on its own (when it is first called), and the gather of a buffer (a fancy index and a
    reshape) cost more to compile than the expressions; this form compiles in about half
    the time. ``GATHER`` is written too, for the CUDA kernel, which calls the module's
    ``point`` and reads the tensor's entries through it."""
    head, values = text
    n = len(reduced)
    names = [f"_v{j}" for j in range(n)]
    idx = ", ".join(str(int(g)) for g in gather)
    lines = [f"GATHER = np.array([{idx}], dtype=np.int64)", "", ""]
    if terminal:
        lines += [f"NO_THETA = np.zeros({n_theta})", "", "", "@_jit", "def sample_T(z):",
                  "    t = 0.0", "    th = NO_THETA"]
    else:
        lines += ["@_jit", "def sample(t, z, th):"]
    if n:
        lines += head + [f"    {name} = {v}" for name, v in zip(names, values)]
    entries = [(k, int(g)) for k, g in enumerate(gather) if int(g) < n]
    if shape == ():          # a float: a constant's literal, else its (float) variable
        e = reduced[entries[0][1]] if entries else 0
        lines.append(f"    return {float(e)!r}" if getattr(e, "is_Number", True)
                     else f"    return {names[entries[0][1]]}")
        return lines
    lines.append(f"    out = np.zeros({tuple(shape)!r})")
    for k, g in entries:      # whole indices, no flat view: the tracer reads this too
        index = ", ".join(str(int(i)) for i in np.unravel_index(k, shape))
        lines.append(f"    out[{index}] = {names[g]}")
    lines.append("    return out")
    return lines


#: The prefix of the generated modules' names (then the source's SHA-256).
PREFIX = "invimbed_codegen_"


def is_generated(fn: Any) -> bool:
    """Whether ``fn`` (a function or numba dispatcher) is one of a generated module's
    functions, which write into nothing but their own ``out`` (``point``, ``kernel``:
    the one they are given)."""
    module = getattr(getattr(fn, "py_func", fn), "__module__", None) or ""
    return module.startswith(PREFIX) and sys.modules.get(module) is not None


def load(body: list[str], options: str = "") -> types.ModuleType:
    """The generated module of ``body`` (see the module docstring); ``options`` are more
    keywords of its ``njit``, as source (``", error_model='numpy'"``)."""
    source = HEADER.format(cache=True, options=options) + "\n\n" + "\n".join(body) + "\n"
    name = PREFIX + hashlib.sha256(source.encode()).hexdigest()[:32]
    if name in sys.modules:
        return sys.modules[name]
    folder = cache_dir()
    if folder is not None:
        path = folder / f"{name}.py"
        try:
            if not path.is_file() or path.read_text() != source:
                tmp = folder / f".{name}.{os.getpid()}.tmp"
                tmp.write_text(source)
                os.replace(tmp, path)
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
            return module
        except OSError:
            pass
    module = types.ModuleType(name)
    memory = HEADER.format(cache=False, options=options) + "\n\n" + "\n".join(body) + "\n"
    exec(compile(memory, f"<{name}>", "exec"), module.__dict__)
    sys.modules[name] = module
    return module
