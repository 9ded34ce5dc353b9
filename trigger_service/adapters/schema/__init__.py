"""Every name the service stores things under: Cassandra, Redis and SQS, in one place.

One module per store, each with the sizes and lifetimes of what it names: ``cassandra``
(tables, columns, partitions), ``redis`` (keys) and ``sqs`` (queues and message fields).
Code imports this package (``from trigger_service.adapters import schema``): every name is
here, whichever store it belongs to.
"""

from trigger_service.adapters.schema.cassandra import *  # noqa: F403
from trigger_service.adapters.schema.redis import *  # noqa: F403
from trigger_service.adapters.schema.sqs import *  # noqa: F403
