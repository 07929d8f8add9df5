"""run.py — the meson test `python`: pytest over python/tests, or skip (77).

Skips with exit status 77 (meson's SKIP) when pytest is not installed or the
extension was not built; otherwise runs `python3 -m pytest ARGS...` and
returns its status.
"""
import sys

SKIP = 77

try:
    import pytest
except ImportError:
    print("python: pytest is not installed (apt-get install python3-pytest); skipped")
    sys.exit(SKIP)
try:
    import rkv  # noqa: F401
except ImportError as e:
    print(f"python: the extension rkv is not importable ({e}); skipped")
    sys.exit(SKIP)

sys.exit(pytest.main(["-p", "no:cacheprovider", *sys.argv[1:]]))
