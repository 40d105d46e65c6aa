"""The package version, in a module of its own so that package code and the build read it without
importing the front door (``setup.cfg``: ``version = attr: probes._version.__version__``)."""

__version__ = "0.1.0"
