"""Worker processes started beside the test, on a shared server."""
