-- How many orders rows hold each status, as (status, count).
SELECT status, count(*) FROM orders GROUP BY status ORDER BY status
