-- Cancels the resting order $1 by its client: it leaves the book (no
-- sequence), holds nothing and is finished now; no cancel reason.
UPDATE orders
SET status = 'canceled', cancel_reason = NULL, hold = 0, sequence = NULL, updated_at = now(), finished_at = now()
WHERE id = $1
