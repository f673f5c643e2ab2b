"""Models beyond one process: snapshots published to a topic, and several learners in one consumer group."""
