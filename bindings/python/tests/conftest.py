import os

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# -- loaderx, the reference wheel -------------------------------------------------------

#: Set by `make test`: interop tests must run there, so a missing loaderx is a failure.
REQUIRE_INTEROP = "ZRECORD_REQUIRE_INTEROP"


@pytest.fixture(scope="session")
def loaderx():
    """The reference wheel, loaderx 0.5.4. Without it the test is skipped, with the reason in
    the summary (`pytest -rs`), unless ZRECORD_REQUIRE_INTEROP=1, where it is an error."""
    try:
        import loaderx as module
    except ImportError as e:
        why = f"loaderx 0.5.4 cannot be imported ({e}); `pip install loaderx==0.5.4` (make setup-python does)"
        if os.environ.get(REQUIRE_INTEROP) == "1":
            pytest.fail(f"{REQUIRE_INTEROP}=1 but {why}", pytrace=False)
        pytest.skip(f"interop not tested: {why}")
    return module
