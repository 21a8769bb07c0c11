"""Fixtures of the surveillance tests (defined in the _support modules, registered here)."""

from tests.surveillance._support import site  # noqa: F401
