"""SQS consumers that claim due triggers with a Cassandra LWT and deliver them."""
