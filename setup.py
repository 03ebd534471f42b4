"""Only the Cython extensions live here; all metadata is in setup.cfg.

Every ``<folder>/_name.pyx`` in a package folder becomes the extension
``prefixbench.<folder>._name`` (``api/`` is ``prefixbench`` itself); each sits
beside its pure-Python reference.

``PREFIXBENCH_PURE=1`` at build time builds no extension at all (no C
compiler, Cython or NumPy headers needed): the installed package then runs
its pure-Python references, and must run with ``PREFIXBENCH_PURE=1`` too
(``prefixbench.twins`` refuses to fall back silently otherwise).
"""
import glob
import os

from setuptools import Extension, setup

FOLDERS = {"api": "prefixbench", "harness": "prefixbench.harness", "plugins": "prefixbench.plugins",
           "engines": "prefixbench.engines", "workloads": "prefixbench.workloads",
           "reports": "prefixbench.reports"}
PURE = os.environ.get("PREFIXBENCH_PURE", "").strip().lower() in ("1", "true", "yes", "on")


def extensions():
    import numpy
    for folder, package in FOLDERS.items():
        for src in sorted(glob.glob(os.path.join(folder, "*.pyx"))):
            mod = os.path.splitext(os.path.basename(src))[0]
            yield Extension(
                f"{package}.{mod}", [src],
                include_dirs=[numpy.get_include()],
                extra_compile_args=["-O3"],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            )


def ext_modules():
    if PURE:
        return []
    from Cython.Build import cythonize
    return cythonize(
        list(extensions()),
        compiler_directives={"language_level": "3", "boundscheck": False,
                             "wraparound": False, "cdivision": True},
    )


setup(ext_modules=ext_modules())
