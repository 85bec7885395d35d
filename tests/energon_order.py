"""get_train_dataset with energon-arrow's global order (`sample_order="global"`): for the tests of properties
that only that order has (the same batches for any worker count, states that survive world size changes)."""

from __future__ import annotations

import functools

import energon_arrow as ea

global_order_train_dataset = functools.partial(ea.get_train_dataset, sample_order="global")
