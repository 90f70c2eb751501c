"""One driver module per peer library; each runs in its own venv and prints one JSON line."""
