"""The ``zr`` command of the wheel: the Rust command line (``zrecord_cli::run``), linked into
the extension, so ``pip install zrecord`` gives every ``zr`` subcommand without a Rust
toolchain."""

import os
import sys

from ._zrecord import _zr_main


def main() -> None:
    """Entry point of the ``zr`` console script."""
    sys.stdout.flush()
    sys.stderr.flush()
    code = _zr_main([os.fsdecode(a) for a in sys.argv[1:]])
    sys.exit(code)


if __name__ == "__main__":
    main()
