-- Sets the status of the instrument $1 to $2 (trading or halted). No row
-- changed: no instrument has the symbol.
UPDATE instruments SET status = $2 WHERE symbol = $1
