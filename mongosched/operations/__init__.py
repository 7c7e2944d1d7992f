"""What an :class:`~mongosched.App` does to stored jobs, schedules and pauses on
behalf of its users: queries, cancel, retry, purge, bulk changes, pauses."""
