"""What one included transaction cost the provider: its fee, its gas and how often it was signed again.

Carried on the chain answer of the tx (``WithdrawPage``, ``CloseOutcome``)
rather than as a message of its own, so that every tx's cost reaches the
actors, the capture and the metrics with its outcome and is never counted
apart from it.
"""

from __future__ import annotations


from messages.codec import Message
from messages.coins import Coin

__all__ = ["TxCost"]


class TxCost(Message, tag="tx_cost"):
    #: the fee the tx carried (the chain takes it whole once the tx is included), per denom
    fee: tuple[Coin, ...] = ()
    #: the gas limit it was signed with, and what the chain says it used
    gas_wanted: int = 0
    gas_used: int = 0
    #: times the client signed it again because the node expected another account sequence
    sequence_retries: int = 0
    #: times the client signed it again with more gas after running out
    out_of_gas_retries: int = 0
