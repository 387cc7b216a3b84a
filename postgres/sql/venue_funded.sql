-- Whether the venue ($1, orders.VenueAccount) has any balance row: a venue
-- without one has never been funded.
SELECT EXISTS (SELECT 1 FROM balances WHERE account_id = $1)
