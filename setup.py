"""The build steps pyproject.toml cannot declare: optional compiled modules, and the shipped configurations.

The compiled modules (plain C, the CPython API only) are built when a C compiler works; when none does, the
install goes on without them, with one warning, and the package runs its Python code paths, which give the
same results bit for bit, more slowly. The YAML files of ``configs/`` are copied into the package
(``pegasos_stream/configs``), so that an installed ``pegasos-stream`` finds them by name in any directory.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import BaseError, CCompilerError

ROOT = Path(__file__).resolve().parent

#: Optimised, with floating point exactly as written (no fast-math, no fused multiply-add): the compiled loops
#: give the Python code's results bit for bit. MSVC's /fp:precise is its form of the same promise.
FLAGS = ["-O2", "-fno-fast-math", "-ffp-contract=off"]
MSVC_FLAGS = ["/O2", "/fp:precise"]

#: The headers the compiled modules share (static inline code, compiled into each module that includes it).
COMMON = "pegasos_stream/_common.h"  # checked array buffers, growing buffers, columns of a vocabulary
LINES = "pegasos_stream/_lines.h"  # the lines a parser reads: a list of bytes or the spans of a block
CRC32 = "pegasos_stream/crc32.h"  # the hashing of feature names

#: The compiled modules, each in the subpackage it serves (ARCHITECTURE.md): the learners' loops of the batch
#: replay path, the parsers of svmlight and JSON records, the reading of a file's blocks and lines, and the
#: "bytes" email reader.
EXTENSIONS = [
    Extension("pegasos_stream.learners._loops", ["pegasos_stream/learners/_loops.c"], depends=[COMMON]),
    Extension("pegasos_stream.parse._parse", ["pegasos_stream/parse/_parse.c"], depends=[COMMON, LINES, CRC32]),
    Extension("pegasos_stream.io._blocks", ["pegasos_stream/io/_blocks.c"], depends=[COMMON, LINES]),
    Extension("pegasos_stream.features._text", ["pegasos_stream/features/_text.c"], depends=[CRC32]),
]

#: Compiled modules earlier versions built and this one does not (``_fast``: split into the first three above).
#: A build removes what is left of them, for any interpreter, from the build directory and the source tree.
RETIRED = ["pegasos_stream._fast"]

#: Why a build may fail for want of a working compiler: none found, one that cannot run, a compile or link error.
BUILD_ERRORS = (CCompilerError, BaseError, OSError)


class OptionalBuildExt(build_ext):
    """Builds each compiled module it can, and leaves out, with one warning, those it cannot."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self.failures: list[str] = []  # a line per module not built: why

    def run(self) -> None:
        self._remove_earlier_builds()
        try:
            super().run()
        except BUILD_ERRORS as error:  # no compiler at all: nothing was built
            self.failures.append(str(error))
        if self.failures:
            self.warn(
                "\n".join(
                    [
                        "the compiled modules of pegasos-stream could not be built; it will run its pure-Python code",
                        "paths, which give the same results, more slowly. Reasons:",
                        *(f"  {failure}" for failure in self.failures),
                        "Install a C compiler (and the Python headers) and reinstall for the compiled speed;",
                        "`pegasos-stream --version` says which code runs.",
                    ]
                )
            )

    def _remove_earlier_builds(self) -> None:
        """Remove the compiled modules an earlier build left, in the build directory and (for an in-place or
        editable build) in the package, so that each module is built from the sources now or is absent: setuptools
        would skip a module whose file is newer than its sources, and install the earlier file of a module it
        could not build. The modules of `RETIRED`, built by earlier versions, are removed wherever they are left
        (the source tree included), whatever interpreter built them."""
        for ext in self.extensions:
            built = [Path(self.build_lib, self.get_ext_filename(self.get_ext_fullname(ext.name)))]
            if self.inplace:
                built.append(Path(self.get_ext_fullpath(ext.name)))
            for path in built:
                path.unlink(missing_ok=True)
        for name in RETIRED:
            package, _, module = name.rpartition(".")
            for root in (Path(self.build_lib), ROOT):
                folder = root.joinpath(*package.split("."))
                for path in [
                    *folder.glob(f"{module}.*.so"),
                    *folder.glob(f"{module}.so"),
                    *folder.glob(f"{module}*.pyd"),
                ]:
                    path.unlink(missing_ok=True)

    def build_extension(self, ext: Extension) -> None:
        ext.extra_compile_args = MSVC_FLAGS if self.compiler.compiler_type == "msvc" else FLAGS
        ext.optional = True  # an in-place (editable) build then copies only the modules that were built
        try:
            super().build_extension(ext)
        except BUILD_ERRORS as error:
            self.failures.append(f"{ext.name}: {error}")


class BuildPyWithConfigs(build_py):
    """Also copies ``configs/*.yaml`` into the built package, as ``pegasos_stream/configs/``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the checkout's configs/
            return
        target = Path(self.build_lib) / "pegasos_stream" / "configs"
        self.mkpath(str(target))
        for path in sorted((ROOT / "configs").glob("*.yaml")):
            self.copy_file(str(path), str(target / path.name))


setup(ext_modules=EXTENSIONS, cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithConfigs})
