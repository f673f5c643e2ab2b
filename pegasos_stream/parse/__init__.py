"""Records to events: the Python parser, batches of records parsed at once, and the compiled parsers."""
