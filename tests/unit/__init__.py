"""Pure logic: no store, no threads, no clock but a fake one."""
