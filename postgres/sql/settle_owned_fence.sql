-- An owner's fence, the first statement of each of its batch transactions:
-- $1 symbol, $2 the owner's epoch (bigint), $3 the instrument's terms as
-- the owner loaded them. Locks the instrument row; returns nothing; raises
-- SETTLEFENCED (SQLSTATE P0001) when another owner took the instrument
-- over, SETTLESTALE when its terms changed (settlement_owner_fence,
-- migration 0015).
--
-- An owner stopped in the middle of sending its batch (SIGSTOP, a stalled
-- host) would keep the instrument row locked, and the next owner's
-- take-over waiting, for as long as it stays stopped: the transaction
-- ends itself after 5 s without a statement, the ownership lease's default.
--
-- The statements after it in the transaction (the batch's write) run with
-- generic plans, made once per connection: under the default each would be
-- planned again on every write, its generic plan guessed dearer than one
-- for the write's few orders (migration 0023 keeps those plans on the
-- keys; TestSettlementGenericPlansProbeKeys). Sequential scans are priced
-- out for them: plans cached while the tables were small, the tables then
-- grown past their statistics, scanned a table once per key
-- (TestSettlementGrownPlansProbeKeys).
-- The settings apply to plans made in this transaction, so the write's
-- statements are the owner's own texts (settle_statements.go): a plan the
-- locked path or a cancel made never serves them.
SELECT settlement_owner_fence($1::text, $2::bigint, $3::text),
       set_config('idle_in_transaction_session_timeout', '5s', true),
       set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_seqscan', 'off', true)
