"""Pure values and decisions: what a stored job is, what follows a run, checks of
what users pass and the filters they give. No I/O, no threads, no clock but the
one passed in."""
