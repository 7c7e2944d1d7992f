"""An app and its runners in this process, on the test's store."""
