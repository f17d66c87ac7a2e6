"""The ``zr`` command of the wheel: the Rust command line (``zrecord_cli::run``), linked into
the extension, so ``pip install zrecord`` gives every ``zr`` subcommand without a Rust
toolchain."""

import os
import sys

from ._zrecord import _zr_main


def viewer_site() -> "str | None":
    """The viewer's page the wheel carries (``zrecord/_viewer``, copied in by ``make python``
    from ``make view``'s output), or None when this build has none."""
    site = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_viewer")
    return site if os.path.isfile(os.path.join(site, "index.html")) else None


def main() -> None:
    """Entry point of the ``zr`` console script."""
    # `zr view` looks at --site, then $ZR_VIEW_SITE, then the source tree it was built
    # from, which a pip user does not have: the wheel's own page comes before the last.
    site = viewer_site()
    if site is not None:
        os.environ.setdefault("ZR_VIEW_SITE", site)
    sys.stdout.flush()
    sys.stderr.flush()
    code = _zr_main([os.fsdecode(a) for a in sys.argv[1:]])
    sys.exit(code)


if __name__ == "__main__":
    main()
