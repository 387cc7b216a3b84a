-- The first statement of an owner's read before a write (settle_existing,
-- settle_duplicates, settle_takers, sent in one pipeline and so one
-- implicit transaction): the statements after it, until the pipeline's
-- end, run with generic plans, made once per connection. Under the default
-- each was planned again on every read (its generic plan guessed dearer
-- than one for the batch's few orders), ≈ 0.1 ms a statement; each of them
-- reads its rows by their keys whatever the plan
-- (TestSettlementGenericPlansProbeKeys). Local to the transaction, as
-- settle_owned_fence.sql's for the write: the pool's other users keep the
-- default. Sequential scans are priced out for the same statements: a
-- plan cached while the tables were small, the tables then grown past
-- their statistics, scanned a table once per key
-- (TestSettlementGrownPlansProbeKeys). The settings apply to plans made
-- in this transaction, so the statements are the owner's own texts
-- (settle_statements.go): a plan the locked path made never serves them.
-- No parameters; returns one row, ignored.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_seqscan', 'off', true)
