"""Package discovery for the two import packages, with setuptools' own finder: everything under probe/ (data
folders such as probe/zoo/induction/ are namespace packages, so their files ship as package data) and the
dashboard's folder app/, installed as ``probe_app`` — a renamed folder, which
``[tool.setuptools.packages.find]`` in pyproject.toml cannot express. Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup


def importable(names: list[str]) -> list[str]:
    """Folders whose every part is a Python name (probe/zoo/esm-random/ ships as data of probe.zoo)."""
    return [name for name in names if all(part.isidentifier() for part in name.split("."))]


def packages() -> list[str]:
    """probe and its subpackages, and probe_app with the subfolders of app/."""
    probe = find_namespace_packages(include=["probe", "probe.*"], exclude=["*__pycache__*"])
    dashboard = ["probe_app." + name for name in find_namespace_packages("app", exclude=["*__pycache__*"])]
    return importable([*probe, "probe_app", *dashboard])


if __name__ == "__main__":  # as setuptools runs it (tests/app/test_app_packaging.py imports packages())
    setup(packages=packages())
