"""Builds the pybind11 extension hwadapter._native; everything else is in pyproject.toml."""
from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

setup(
    ext_modules=[Pybind11Extension("hwadapter._native", ["core/native/native.cpp"],
                                   include_dirs=["core/hwadapter/include"], cxx_std=17)],
    cmdclass={"build_ext": build_ext},
)
