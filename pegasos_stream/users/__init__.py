"""Users partitioned by key on a stream engine: each instance scores and learns the personal offsets of the users
its partitions hold (`instance`: what one record does; `quix_app`: the instance on Quix Streams)."""
