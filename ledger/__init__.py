"""Closing the books: the SQLite ledger of what every lease used and what was
withdrawn, the billing-month tick (open -> grace -> metered -> finalized), and
per-tenant statements. See ``ledger.tick`` for the state machine and
``ledger.metering`` for how a month is counted to the chain's last unit."""
