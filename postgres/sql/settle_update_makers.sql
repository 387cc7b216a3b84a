-- Applies a settlement batch's fills and cancels to the resting orders it
-- matched: $1..$7 are parallel arrays (id, quantity filled, notional
-- filled, fees paid, hold given up (consumed by the fills, released, or
-- all of it for a canceled order), new status, cancel reason or NULL: the
-- batch canceled a maker whose fill it could not compute exactly). A
-- filled or canceled maker leaves the book: no sequence, finished now.
UPDATE orders o
SET filled_quantity = o.filled_quantity + m.quantity,
    filled_notional = o.filled_notional + m.notional,
    fees = o.fees + m.fees,
    hold = o.hold - m.hold,
    status = m.status,
    cancel_reason = coalesce(m.cancel_reason, o.cancel_reason),
    sequence = CASE WHEN m.status IN ('open', 'partially_filled') THEN o.sequence END,
    updated_at = now(),
    finished_at = CASE WHEN m.status IN ('open', 'partially_filled') THEN o.finished_at ELSE now() END
FROM unnest($1::text[], $2::numeric[], $3::numeric[], $4::numeric[], $5::numeric[], $6::text[], $7::text[])
    AS m(id, quantity, notional, fees, hold, status, cancel_reason)
WHERE o.id = m.id
