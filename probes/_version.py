"""The package version and the distribution name, in a module of their own so that package code and the build
read them without importing the front door (``setup.cfg``: ``version = attr: probes._version.__version__``).

The distribution (what ``pip install`` names) is ``probes-attention``, because ``probes`` on PyPI is an
unrelated project; the import name stays ``probes``, as scikit-learn's stays ``sklearn``. ``setup.cfg``'s
``name`` must equal :data:`DISTRIBUTION` (tests/test_wheel.py checks the built wheel's metadata).
"""

__version__ = "0.7.0"
#: The name the package is installed under (``pip install "probes-attention[gpu]"``,
#: ``importlib.metadata.version(DISTRIBUTION)``); not the import name.
DISTRIBUTION = "probes-attention"
