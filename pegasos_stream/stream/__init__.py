"""Streams: records from sources, events from records, the prequential runner, sinks, Kafka."""
