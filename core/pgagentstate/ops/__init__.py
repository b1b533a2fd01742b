"""Store operations, written once as generators and run by the sync and async drivers.

An operation yields :class:`Tx` (statements to run in one transaction, pipelined in one round trip),
:class:`Call` (user code to run outside any transaction) or :class:`Sleep`, receives each result back,
and returns its value. It never touches a connection itself, so every operation has one implementation
shared by :class:`~pgagentstate.StateStore` and :class:`~pgagentstate.AsyncStateStore`.
"""
