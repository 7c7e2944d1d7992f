"""The store contract: one suite every :class:`~mongosched.store.Store` passes."""
