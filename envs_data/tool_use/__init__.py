"""The ``tool_use`` domain: a customer-service agent with JSON-schema tools over an orders/bookings/accounts database.

The whole domain is this folder (copy it to make another): ``domain.py`` (its :class:`~pivot_envs.domains.Domain`,
default verifier recipe and world registration), ``world.py`` (its world), ``generator.py`` and the tool code they
share, and the bundled data files. Its name is the folder's name.
"""

NAME = __name__.rpartition(".")[2]
"""The domain's name, and its world's: the folder's name."""
