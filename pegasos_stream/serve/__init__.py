"""Serving a model that never learns: a stream of records, HTTP requests, and SpamAssassin's spamd protocol."""
