"""The DDP tests' shared rank launcher is stopped when they are done."""

from collections.abc import Iterator

import pytest

from .ranks import stop_forkserver


@pytest.fixture(scope="package", autouse=True)
def _ranks_forkserver() -> Iterator[None]:
    yield
    stop_forkserver()
