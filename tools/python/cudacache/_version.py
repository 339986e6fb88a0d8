"""The package's version: the C header's CUDACACHE_VERSION_STRING (tests/python checks that
they agree; a wheel's metadata reads the same header)."""

__version__ = "0.1.0"
