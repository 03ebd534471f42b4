"""Only the Cython extensions live here; all metadata is in setup.cfg.

Every ``<folder>/_name.pyx`` in a package folder becomes the extension
``prefixbench.<folder>._name``; each sits beside its pure-Python reference.
"""
import glob
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

FOLDERS = ("harness", "plugins", "engines", "workloads", "reports")


def extensions():
    for folder in FOLDERS:
        for src in sorted(glob.glob(os.path.join(folder, "*.pyx"))):
            mod = os.path.splitext(os.path.basename(src))[0]
            yield Extension(
                f"prefixbench.{folder}.{mod}", [src],
                include_dirs=[numpy.get_include()],
                extra_compile_args=["-O3"],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            )


setup(
    ext_modules=cythonize(
        list(extensions()),
        compiler_directives={"language_level": "3", "boundscheck": False,
                             "wraparound": False, "cdivision": True},
    ),
)
