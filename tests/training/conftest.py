"""Every test of the training stage runs its torch work on one thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread per test: on 2 busy cores, two intra-op threads of tiny matrices spin against each other
    (50 Adam steps of a tiny BERT took 24 s of CPU instead of 0.6 s). Module fixtures that train set it too."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
