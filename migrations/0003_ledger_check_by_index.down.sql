ALTER FUNCTION ledger_transaction_balanced() RESET enable_seqscan;
