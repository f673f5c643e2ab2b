"""Kafka: the consumer-group source and its offsets, a module per client, and a cluster's delta topic."""
