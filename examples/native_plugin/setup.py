"""Builds libhwadapter_cdemo.so (a plain C library, not a Python extension) into the package with the system
C compiler ($CC, else cc) against hwadapter's device_api.h ($HWADAPTER_INCLUDE, else the installed hwadapter's)."""
import os
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def include_dir() -> str:
    """The folder that holds hwadapter/device_api.h."""
    folders = [os.environ.get("HWADAPTER_INCLUDE"), HERE.parents[1] / "core" / "hwadapter" / "include"]  # a checkout
    try:  # installed with hwadapter (visible to a build without isolation: pip install --no-build-isolation)
        from hwadapter.plugin import NATIVE_INCLUDE
        folders.insert(1, NATIVE_INCLUDE)
    except ImportError:
        pass
    for folder in filter(None, folders):
        if (Path(folder) / "hwadapter" / "device_api.h").exists():
            return str(folder)
    raise SystemExit("hwadapter-cdemo: hwadapter/device_api.h not found; set HWADAPTER_INCLUDE to the folder that "
                     "holds it (core/hwadapter/include in a hwadapter checkout)")


def compile_library(out: Path) -> None:
    """cc -shared: the library the shim loads."""
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-std=c11", f"-I{include_dir()}", str(HERE / "src" / "cdemo.c"),
                    "-o", str(out), "-lpthread"], check=True)


class BuildWithLibrary(build_py):
    """build_py, then the C library beside the package's modules."""

    def run(self):
        super().run()
        compile_library(Path(self.build_lib) / "hwadapter_cdemo" / "libhwadapter_cdemo.so")


class BinaryDistribution(Distribution):
    """The wheel holds native code: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
