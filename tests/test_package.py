import doctest
import importlib
import pathlib
import pkgutil
import re
import subprocess
import sys

import pytest

import arrayrope

OPTIONAL = ("torch", "jax", "dask", "cupy", "onnx", "onnxruntime", "array_api_strict", "matplotlib")


def test_import_loads_no_optional_backend():
    code = (
        "import sys, arrayrope, arrayrope.testing\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def _new_modules(code: str) -> set[str]:
    """Modules a fresh interpreter holds after ``import numpy`` and then ``code``, beyond numpy's."""
    probe = (
        "import sys, numpy\nbefore = set(sys.modules)\n"
        + code
        + "\nprint('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_import_stays_light():
    """Start-up: nothing of NumPy's testing or build tools, no ONNX, no array_api_compat wrapper, few modules."""
    new = _new_modules("import arrayrope")
    heavy = {
        m
        for m in new
        if m.split(".")[0] in ("unittest", "email", "onnx", *OPTIONAL)
        or m.startswith(("numpy.testing", "numpy.f2py", "array_api_compat.numpy"))
    }
    assert not heavy, sorted(heavy)
    assert len([m for m in new if not m.startswith("arrayrope")]) < 30, sorted(new)


def test_pytest_plugin_imports_neither_arrayrope_nor_numpy():
    """pytest loads the plugin in every run of every project with arrayrope installed."""
    code = (
        "import sys, _arrayrope_pytest\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('arrayrope', 'numpy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_export_is_a_subpackage_of_the_core_that_the_core_never_imports():
    """``arrayrope.export`` lives inside the package (no top-level ``export``, no ``package-dir`` mapping), and no
    module of the core imports it: dependencies point from export (and the CLI, on top) to the core only."""
    root = pathlib.Path(arrayrope.__file__).resolve().parent
    spec = importlib.util.find_spec("arrayrope.export")
    assert spec is not None and pathlib.Path(spec.origin).resolve().parent == root / "export"
    offenders = []
    for path in root.rglob("*.py"):
        if (root / "export") in path.parents or (root / "cli") in path.parents:
            continue
        text = path.read_text()
        if re.search(r"^\s*(from|import)\s+(arrayrope\.export|\.+export)\b", text, re.MULTILINE):
            offenders.append(str(path.relative_to(root)))
    assert offenders == []


def test_export_takes_the_convention_probe_and_its_report_type_from_the_core():
    """The one verdict type and the convention probe (``identify_rope``) live in the core; export imports nothing
    of the testing package, which re-exports them under their public names."""
    import arrayrope._identify
    import arrayrope.testing

    root = pathlib.Path(arrayrope.__file__).resolve().parent / "export"
    importers = {
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if any(m.startswith("arrayrope.testing") for m in _imported_modules(path, _package_of(path)))
    }
    assert importers == set()
    assert arrayrope.testing.identify_rope is arrayrope._identify.identify_rope
    assert arrayrope.testing.RopeConvention is arrayrope._identify.RopeConvention


def _package_of(path: pathlib.Path) -> str:
    """The package a module file of arrayrope belongs to (``arrayrope.export.fuse`` for ``export/fuse/_probe.py``)."""
    root = pathlib.Path(arrayrope.__file__).resolve().parent
    return ".".join(("arrayrope", *path.resolve().parent.relative_to(root).parts))


def _imported_modules(path: pathlib.Path, package: str) -> set[str]:
    """The absolute names of the modules a module of ``package`` imports (``from x import y`` counts ``x.y`` too:
    ``y`` may be a module), read with ``ast``, imports inside functions included."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def test_lib_lies_below_the_backends_fence():
    """``arrayrope._lib`` imports nothing from ``arrayrope.backends`` (which imports it): what its helpers ask of the
    fence comes through ``_lib.fence``, which the backends package fills as it loads."""
    root = pathlib.Path(arrayrope.__file__).resolve().parent / "_lib"
    modules = sorted(root.rglob("*.py"))
    assert {p.name for p in modules} >= {"digits.py", "dtypes.py", "positions.py", "fence.py"}
    offenders = {
        str(path.relative_to(root)): sorted(
            m for m in _imported_modules(path, _package_of(path)) if m.split(".")[:2] == ["arrayrope", "backends"]
        )
        for path in modules
    }
    assert {p: found for p, found in offenders.items() if found} == {}
    assert _imported_modules(root / "digits.py", "arrayrope._lib") >= {"arrayrope._lib.fence"}
    assert "arrayrope.backends" in _imported_modules(root.parent / "apply.py", "arrayrope")  # relative imports resolved


def test_backends_fill_the_fence_of_lib():
    from arrayrope import backends
    from arrayrope._lib import fence

    assert fence.backends is backends


def test_array_libraries_are_imported_behind_the_fence_and_in_the_pytorch_exporter_bridge_only():
    """The core names no array library but NumPy (the host's): only ``backends/`` imports PyTorch, CuPy, JAX,
    Dask or array_api_strict, and above the core only ``export/torch/``, which plugs into PyTorch's exporter
    (``torch.library``, ``torch.onnx``) and is loaded through ``backends.integrations`` when the torch backend
    loads."""
    import ast

    root = pathlib.Path(arrayrope.__file__).resolve().parent
    allowed = (root / "backends", root / "export" / "torch")
    from arrayrope.backends._libraries import TABLE

    libraries = {module for lib in TABLE if lib.name != "numpy" for module in lib.modules}
    assert libraries == {"torch", "cupy", "jax", "jaxlib", "dask", "array_api_strict"}
    importers: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for name in names:
                if name.split(".")[0] in libraries:
                    importers.setdefault(str(path.relative_to(root)), set()).add(name.split(".")[0])
    assert {p for p in importers if not any((root / p).is_relative_to(a) for a in allowed)} == set()
    assert {p for p in importers if (root / p).is_relative_to(root / "export")} == {
        "export/torch/__init__.py",
        "export/torch/_bridge.py",
    }
    assert importers["backends/torch.py"] == {"torch"}  # the walk sees imports inside functions too


def test_private_exporter_modules_only_in_the_version_gated_bridge():
    root = pathlib.Path(arrayrope.__file__).resolve().parent
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "torch.onnx._internal" in p.read_text())
    assert users == ["export/torch/__init__.py", "export/torch/_bridge.py"]


def test_importing_arrayrope_installs_nothing_into_the_import_system():
    code = (
        "import sys; before = list(sys.meta_path), list(sys.path_hooks); import arrayrope; "
        "print(before == (list(sys.meta_path), list(sys.path_hooks)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def _modules():
    yield "arrayrope"
    for info in pkgutil.walk_packages(arrayrope.__path__, "arrayrope."):
        if not info.name.endswith("__main__"):
            yield info.name


@pytest.mark.parametrize("name", list(_modules()))
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:  # a backend module (or the export layer) whose library is not installed here
        if name.startswith(("arrayrope.backends.", "arrayrope.export")) and exc.name in OPTIONAL:
            pytest.skip(f"{name} needs {exc.name}, which is not installed")
        raise
    if name.startswith("arrayrope.export") and importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("the export layer's examples run models on onnxruntime, which is not installed")
    # A docstring whose examples import an optional library that is not installed here is skipped, by name;
    # the rest of the module's examples still run.
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    skipped = []
    for test in finder.find(module, name):
        imported = {m for ex in test.examples for m in re.findall(r"^\s*(?:import|from)\s+(\w+)", ex.source, re.M)}
        missing = sorted(m for m in imported if m in OPTIONAL and importlib.util.find_spec(m) is None)
        if missing:
            skipped.append(f"{test.name} (needs {', '.join(missing)})")
            continue
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0
    if skipped and result.attempted == 0:
        pytest.skip("examples need libraries not installed here: " + "; ".join(skipped))


def test_the_torch_floor_is_the_oldest_pytorch_the_export_bridge_is_tested_with():
    """CI runs the PyTorch tests on each end of TESTED_TORCH; the torch extra's floor is its oldest."""
    import tomllib

    from arrayrope.export.torch import TESTED_TORCH

    extra = tomllib.loads((pathlib.Path(arrayrope.__file__).parents[1] / "pyproject.toml").read_text())
    floor = next(d for d in extra["project"]["optional-dependencies"]["torch"] if d.startswith("torch>="))
    assert floor.split(">=")[1].split(",")[0] == "{}.{}".format(*TESTED_TORCH[0])


#: The modules written by a script (tools/families.py), not by hand.
GENERATED = {"families/_table.py"}


def test_no_hand_written_module_is_over_450_lines():
    """A module past 450 lines is split by topic (as array-api-extra splits its largest ones)."""
    root = pathlib.Path(arrayrope.__file__).resolve().parent
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    assert set(GENERATED) <= set(sizes)
    assert {p: n for p, n in sizes.items() if n > 450 and p not in GENERATED} == {}
