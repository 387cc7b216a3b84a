-- Applies a settlement batch's fills to the resting orders it matched:
-- $1..$6 are parallel arrays (id, quantity filled, notional filled, fees
-- paid, hold given up (consumed by the fills or released), new status). A
-- filled maker leaves the book: no sequence, finished now.
UPDATE orders o
SET filled_quantity = o.filled_quantity + m.quantity,
    filled_notional = o.filled_notional + m.notional,
    fees = o.fees + m.fees,
    hold = o.hold - m.hold,
    status = m.status,
    sequence = CASE WHEN m.status IN ('open', 'partially_filled') THEN o.sequence END,
    updated_at = now(),
    finished_at = CASE WHEN m.status IN ('open', 'partially_filled') THEN o.finished_at ELSE now() END
FROM unnest($1::text[], $2::numeric[], $3::numeric[], $4::numeric[], $5::numeric[], $6::text[])
    AS m(id, quantity, notional, fees, hold, status)
WHERE o.id = m.id
