"""The actors: SchedulerActor, CreditMonitorActor (one per tenant), ChainActor.

Each actor module has a pure state machine beside it (``*_state`` or a
decision module) holding every decision; the actor only carries messages.
"""
