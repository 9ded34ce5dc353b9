"""The trigger store on Apache Cassandra: ``store`` (the ports), ``statements`` (CQL and row
mapping), ``driver`` (connecting, the asyncio bridge, error translation), ``migrate``."""
