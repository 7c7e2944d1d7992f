"""The web dashboard, through WSGI and in a headless browser."""
