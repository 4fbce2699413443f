"""The agent tests use the session catalogs of ``tests/conftest.py`` (``small_catalog``, ``default_catalog``)."""
