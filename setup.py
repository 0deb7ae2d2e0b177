"""Packaging for oneflow-autoddl. The environment is made by ci/bootstrap.sh."""
from setuptools import find_packages, setup

setup(
    name="oneflow_autoddl",
    version="0.1.0",
    description="AutoDDL: near-optimal-bandwidth automatic SBP parallelism for OneFlow nn.Graph",
    packages=find_packages(include=["oneflow_autoddl", "oneflow_autoddl.*"]),
    package_data={"oneflow_autoddl": ["cost/presets/*.json", "models/templates/*.json"]},
    # OneFlow 0.9.0 ships wheels for CPython 3.7-3.10 only.
    python_requires=">=3.7,<3.11",
    install_requires=[
        "oneflow==0.9.0",
        # OneFlow 0.9.0's extension is built against the numpy 1.x ABI.
        "numpy>=1.22,<2",
        "tabulate>=0.8",
        "tqdm>=4",
    ],
    extras_require={"test": ["pytest>=7"]},
    entry_points={"console_scripts": ["oneflow-autoddl=oneflow_autoddl.cli:main"]},
)
