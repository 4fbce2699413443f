"""The catalog sizes the tests share (``tests/conftest.py`` builds them once per session)."""

SMALL_PRODUCTS, SMALL_SEED = 2_000, 7
