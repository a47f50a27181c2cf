"""Cluster mode: a leader queues benchmark jobs (one scenario each) in a durable store and
runs them on followers through Dask distributed, ordered and placed by a two-tier policy.

`job` is the job and its states, `store` the SQLite store every state change is committed
to before it is acted on, `policy` the scheduling policies (pure objects, shared by the
leader and the simulator), `trace` and `simulate` the discrete-event simulator that
measures those policies at scale. The leader, followers and API build on these.
"""
